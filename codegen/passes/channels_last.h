// codegen/passes/channels_last.h — convolution graphs computed in channels-last layout
// (codegen/ layer; a graph rewrite for the loop backends).
//
// Eager PyTorch keeps a model's activations in the layout its input has: NCHW for an NCHW image.
// oneDNN (CPU) and cuDNN (GPU) compute convolutions in NHWC, so every conv on an NCHW tensor
// reorders its input and output around the call (on an H100 at batch 32, cuDNN's NCHW<->NHWC
// transposes were a quarter of ResNet-18's time). A graph's intermediate values are its own:
// nobody outside sees their strides. So where a conv's result feeds only code that reads any
// layout (the fused kernels, other convs, pooling), that result and the values computed from it
// elementwise are given channels-last strides: ATen's conv then takes and returns NHWC without a
// reorder, the kernels between convs read and write NHWC (a pure pointwise kernel walks its
// output's memory order, so its rows run along C), and an NCHW graph input that a conv reads is
// copied into NHWC once, by a clone node this pass adds. A graph with fewer than two such convs
// stays as it is (around one conv, the copies are the reorders ATen makes). Values the caller sees (graph inputs and
// outputs) keep eager's layout, and so does every value a view reads (a view's strides were
// derived from its base's), an in-place op touches (except a pointwise one, such as ResNet's
// ReLU(inplace=True), whose output and `self` are one buffer and move together), or that has a
// size symbol.
// CPU graphs only: on a GPU it does not pay yet (channels_last.cpp has the numbers). FASTDYN_CHANNELS_LAST=0 leaves every graph as
// captured (for comparison).
#pragma once
#include "codegen/graph/graph.h"

namespace fastdyn::codegen {

// g with its conv activations in channels-last layout (g itself when no conv result qualifies).
Graph prefer_channels_last(const Graph& g);

}  // namespace fastdyn::codegen
