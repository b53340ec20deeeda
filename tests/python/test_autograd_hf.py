"""Training the five Hugging Face models of the zoo with dropout on: under fastdyn.jit, losses,
gradients and parameters equal eager's step after step, and the backward is the compiled one."""
import pytest
import torch

import fastdyn

transformers = pytest.importorskip("transformers")
import hf_zoo  # noqa: E402

pytestmark = [pytest.mark.skipif(not fastdyn._C.has_llvm_cpu, reason="needs fastdyn with the llvm_cpu backend"),
              pytest.mark.usefixtures("synchronous_compile")]


def compiled_nodes(t):
    """How many CompiledFunctionBackward nodes the autograd graph behind `t` holds."""
    seen, todo, count = set(), [t.grad_fn], 0
    while todo:
        fn = todo.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        count += fn.name() == "CompiledFunctionBackward"
        todo.extend(f for f, _ in fn.next_functions)
    return count


def loss_of(out):
    return sum(o.float().square().mean() for o in hf_zoo.output_tensors(out) if o.is_floating_point())


@pytest.mark.parametrize("name", sorted(hf_zoo.MODELS))
def test_train_steps_with_dropout_match_eager(name):
    model, inputs = hf_zoo.build(name)
    ref, _ = hf_zoo.build(name)
    ref.load_state_dict(model.state_dict())
    model.train()
    ref.train()
    o1 = torch.optim.SGD(model.parameters(), lr=0.05)
    o2 = torch.optim.SGD(ref.parameters(), lr=0.05)
    compiled = fastdyn.jit(model)
    for step in range(2):
        torch.manual_seed(step)
        loss = loss_of(compiled(**inputs))
        assert compiled_nodes(loss) >= 1, f"{name}: no graph ran its compiled backward"
        torch.manual_seed(step)
        loss_ref = loss_of(ref(**inputs))
        torch.testing.assert_close(loss, loss_ref, rtol=1e-4, atol=1e-5)
        o1.zero_grad()
        loss.backward()
        o2.zero_grad()
        loss_ref.backward()
        for (n, p), r in zip(model.named_parameters(), ref.parameters()):
            if r.grad is None:
                assert p.grad is None, n
                continue
            torch.testing.assert_close(p.grad, r.grad, rtol=1e-3, atol=1e-5, msg=lambda m: f"{name} {n}: {m}")
        o1.step()
        o2.step()
