"""fastdyn's graphs as torch.fx GraphModules (`fastdyn.explain(f, *args).graph_modules()`), for any
FX consumer: one call_function node per graph op, its target the ATen overload the graph names
(`torch.ops.aten.add.Tensor`), arguments as its schema takes them (keyword-only ones by name), placeholders the graph's tensor
inputs in calling order (parameters and buffers the frame read are inputs too), and the output the
graph's outputs as a tuple. Each node's meta["val"] is a meta tensor with the value's dtype, sizes,
strides and storage offset. A graph with size symbols is exported at the sizes of the call explain() traced.

The graph's text is read by fastdyn's own parser (_C.graph_structure); this module only builds
the FX objects."""
import functools
import operator
import warnings

import torch
import torch.fx

from . import _C


@functools.cache
def _dtypes():
    """c10 scalar type names ("Float", "BFloat16") to torch dtypes, derived from torch itself."""
    table = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # experimental and deprecated dtypes say so when made
        for d in vars(torch).values():
            if isinstance(d, torch.dtype) and d not in table.values():
                try:
                    table[torch.empty(0, dtype=d).type().rsplit(".", 1)[-1].removesuffix("Tensor")] = d
                except (RuntimeError, TypeError):
                    pass  # dtypes without a legacy tensor type name (float8, unsigned): never in a graph
    return table


def _dtype(name):
    try:
        return _dtypes()[name]
    except KeyError:
        raise NotImplementedError(f"fastdyn FX export: no torch dtype for {name}") from None


def _overload(qualified):
    """'aten::add.Tensor' -> torch.ops.aten.add.Tensor ('aten::relu' -> .default)."""
    ns, _, rest = qualified.partition("::")
    name, _, overload = rest.partition(".")
    return getattr(getattr(getattr(torch.ops, ns), name), overload or "default")


def graph_module(text, sources=None):
    """The torch.fx.GraphModule of one graph text as explain() reports it; `sources` (explain's
    graph_inputs) name where each input comes from, in each placeholder's meta["source"]."""
    s = _C.graph_structure(text)
    values = s["values"]
    graph = torch.fx.Graph()
    env = {}

    def meta_val(v):
        dtype, sizes, strides, offset, device = values[v]
        extent = offset + sum((n - 1) * st for n, st in zip(sizes, strides)) + 1 if all(sizes) else 0
        return torch.empty(extent, dtype=_dtype(dtype), device="meta").as_strided(sizes, strides, offset)

    def arg(a):
        if isinstance(a, tuple):
            tag, x = a
            if tag == "value":
                return env[x]
            if tag == "values":
                return [None if v is None else env[v] for v in x]
            if tag == "dtype":
                return _dtype(x)
            if tag == "device":
                return torch.device(x)
        return a

    for i, v in enumerate(s["inputs"]):
        env[v] = graph.placeholder(f"v{v}")
        env[v].meta["val"] = meta_val(v)
        if sources is not None:
            env[v].meta["source"] = sources[i]
    for op, args, outputs in s["nodes"]:
        # The graph holds every argument in schema order; FX passes the keyword-only ones by name.
        target = _overload(op)
        positional, keywords = [], {}
        for formal, a in zip(target._schema.arguments, args):
            if formal.kwarg_only:
                keywords[formal.name] = arg(a)
            else:
                positional.append(arg(a))
        node = graph.call_function(target, tuple(positional), keywords)
        if len(outputs) == 1:
            env[outputs[0]] = node
        else:
            for i, v in enumerate(outputs):
                env[v] = graph.call_function(operator.getitem, (node, i))
        for v in outputs:
            env[v].meta["val"] = meta_val(v)
    graph.output(tuple(env[v] for v in s["outputs"]))
    graph.lint()
    return torch.fx.GraphModule(torch.nn.Module(), graph)
