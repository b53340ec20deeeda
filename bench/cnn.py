#!/usr/bin/env python3
"""Convolutional networks (issue 21): eager, fastdyn (jit, inference under no_grad) and
torch.compile, interleaved in one process, on the CPU (2 threads) or a GPU (--device cuda).

    python3 bench/cnn.py [--quick] [--batch 1] [--size 224] [--device cpu|cuda]

The models are built here from torch.nn layers (torchvision does not load beside the CPU build of
torch on the development machine): ResNet-18 (torchvision's BasicBlock architecture: conv, eval
batch norm, ReLU, residual add, max and adaptive average pooling, linear) and a small
MobileNet-style stack (depthwise + pointwise convolutions, batch norm, hardswish). Random weights,
eval mode, running statistics randomised so that batch norm is not the identity.

Per model and mode: the steady-state time per call (median of interleaved rounds of a few calls
each; on a GPU, wall clock around the calls and one synchronize), the first call (compile
included) and the largest difference from eager's output.
"""
import argparse
import statistics
import time

import torch
import torch.nn as nn

import fastdyn


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        idt = x if self.down is None else self.down(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + idt)


class ResNet18(nn.Module):
    def __init__(self, classes=1000):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True),
                                  nn.MaxPool2d(3, 2, 1))
        layers, cin = [], 64
        for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
            layers += [BasicBlock(cin, cout, stride), BasicBlock(cout, cout, 1)]
            cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.layers(self.stem(x))), 1))


def mobile_block(cin, cout, stride):
    return nn.Sequential(nn.Conv2d(cin, cin, 3, stride, 1, groups=cin, bias=False), nn.BatchNorm2d(cin), nn.Hardswish(),
                         nn.Conv2d(cin, cout, 1, bias=False), nn.BatchNorm2d(cout), nn.Hardswish())


class MobileNetish(nn.Module):
    def __init__(self):
        super().__init__()
        chans = [(16, 32, 1), (32, 64, 2), (64, 64, 1), (64, 128, 2), (128, 128, 1), (128, 256, 2), (256, 256, 1)]
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1, bias=False), nn.BatchNorm2d(16), nn.Hardswish())
        self.body = nn.Sequential(*[mobile_block(*c) for c in chans])
        self.head = nn.Linear(256, 1000)

    def forward(self, x):
        return self.head(self.body(self.stem(x)).mean((2, 3)))


def randomise_bn(model):
    g = torch.Generator().manual_seed(1)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.num_features
            m.running_mean.copy_(torch.randn(c, generator=g) * 0.1)
            m.running_var.copy_(torch.rand(c, generator=g) + 0.5)
            m.weight.data.copy_(torch.rand(c, generator=g) + 0.5)
            m.bias.data.copy_(torch.randn(c, generator=g) * 0.1)
    return model


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="skip torch.compile")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    torch.set_num_threads(2)
    torch.manual_seed(0)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    where = torch.cuda.get_device_name(dev) if dev.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"batch {args.batch}, {args.size}x{args.size}, {where}, interleaved in one process\n")
    print("| model | mode | per call (ms) | speed-up over eager | first call (s) | max abs diff vs eager |")
    print("|---|---|---:|---:|---:|---:|")
    for name, make in (("resnet18", ResNet18), ("mobilenet-ish", MobileNetish)):
        model = randomise_bn(make()).eval().to(dev)
        x = torch.randn(args.batch, 3, args.size, args.size, device=dev)
        fns = {"eager": model, "fastdyn": fastdyn.jit(model)}
        if not args.quick:
            fns["inductor"] = torch.compile(model)
        with torch.no_grad():
            want = model(x)
            first, diff = {}, {}
            for k, f in fns.items():
                sync()
                t = time.perf_counter()
                out = f(x)
                sync()
                first[k] = time.perf_counter() - t
                diff[k] = (out - want).abs().max().item()
            if "fastdyn" in fns:
                fastdyn.synchronize()  # background kernels ready: steady state from here
            samples = {k: [] for k in fns}
            for _ in range(args.rounds):
                for k, f in fns.items():
                    sync()
                    t = time.perf_counter()
                    for _ in range(3):
                        f(x)
                    sync()
                    samples[k].append((time.perf_counter() - t) / 3)
        med = {k: statistics.median(v) for k, v in samples.items()}
        for k in fns:
            print(f"| {name} | {k} | {med[k] * 1e3:.1f} | {med['eager'] / med[k]:.2f}x | {first[k]:.2f} | {diff[k]:.1e} |",
                  flush=True)


if __name__ == "__main__":
    main()
