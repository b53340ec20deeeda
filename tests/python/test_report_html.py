"""fastdyn.report_html: the HTML report renderer, on synthetic collector dicts.

The page is parsed with html.parser and checked by element classes, ids and data attributes
(the names the native side's end-to-end tests rely on too), not by substrings alone.
"""
import copy
from html.parser import HTMLParser

import pytest

from fastdyn import report_html

pytestmark = pytest.mark.no_fastdyn

GRAPH = """graph(%0: f32[8, 16]{16, 1}, %1: f32[16, 32]{32, 1}, %2: f32[32]{1}):
  %3: f32[8, 32]{32, 1} = aten::matmul(%0, %1)
  %4: f32[8, 32]{32, 1} = aten::add.Tensor(%3, %2, 1)
  %5: f32[8, 32]{32, 1} = aten::relu(%4)
  %6: f32[8]{1}, %7: i64[8]{1} = aten::max.dim(%5, 1, False)
  %8: f32[8, 32]{32, 1} = aten::sub.Tensor(%5, %3, 1)
  %9: f32[s0, 8]{8, 1} = aten::cat([%6, %6], 0)
  return (%8, %9, %7)
"""

PROGRAM = """backend llvm_cpu (threads 2)
values:
  v3: f32[8, 32]{32, 1} extern s2
  v8: f32[8, 32]{32, 1} buffer s3
extern %3: f32[8, 32]{32, 1} = aten::matmul(%0, %1)
kernel k0 outer[8] inner[32]:
  stage 0 inner:
    %0 = Const f32 0
return (v8)
"""

SOURCE = [
    "def forward(self, x):\n",
    "    y = self.lin(x)\n",
    "    print('y <b>&', y.shape)\n",
    "    s = y.relu().max(1)\n",
    "    if s.sum() > 0:\n",
    "        return y - s\n",
    "    return y\n",
]


def make_entry(index, kernels=None, guards=None, graph=GRAPH, recompile_reason=None):
    kernels = kernels if kernels is not None else [
        {"name": "k0", "values": [4, 5, 8], "loop_ir": "kernel k0 outer[8] inner[32]:\n  %0 = Load v3",
         "code": "define void @k0(ptr %a) {\n  ret void\n}", "code_language": "llvm",
         "locations": ["model.py:11", "model.py:13"]},
        {"name": "k1", "values": [6, 7], "loop_ir": "kernel k1 outer[8]:\n  reduce max",
         "code": None, "code_language": "", "locations": ["model.py:13"]},
    ]
    return {
        "index": index, "graph_text": graph,
        "input_sources": ["L['x']", "L['self'].lin._parameters['weight']", "L['self'].lin.bias"],
        "node_locations": ["model.py:11", "model.py:11", "model.py:13", "model.py:13", "", "model.py:14"],
        "guards": guards if guards is not None else [
            "L['x'] matches tensor(type=Tensor, dtype=Float, device=cpu, size=[8, 16], "
            "stride=[16, 1], requires_grad=False)", "L['self'] is <module>"],
        "backend": "llvm_cpu", "program_text": PROGRAM, "kernels": kernels,
        "timings": [{"pass": "trace", "ms": 1.5}, {"pass": "lower", "ms": 0.25},
                    {"pass": "fuse", "ms": 0.5}, {"pass": "kernels", "ms": 12.0}],
        "compile_ms": 14.25, "ready_ms": 30.5, "recompile_reason": recompile_reason,
    }


def make_data():
    return {
        "title": "fastdyn report: python train.py", "created": "2024-05-01T12:00:00",
        "argv": ["train.py", "--epochs", "3"],
        "fastdyn": {"version": "0.1.0", "backend": "llvm_cpu", "threads": 2},
        "stats": {"frames_seen": 12, "graphs": 3, "graph_breaks": 3, "compile_seconds": 0.0421},
        "codes": [
            {"id": 7, "qualname": "Model.forward", "filename": "/src/model.py", "firstlineno": 10,
             "source": SOURCE,
             "breaks": [
                 {"filename": "/src/model.py", "lineno": 12,
                  "reason": "call to <built-in function print> is not supported", "continued": True},
                 {"filename": "/src/model.py", "lineno": 14,
                  "reason": "a branch depends on a tensor's value", "continued": False},
                 {"filename": "/src/util.py", "lineno": 99,
                  "reason": "Tensor.item() depends on tensor data", "continued": True}],
             "entries": [make_entry(0),
                         make_entry(1, recompile_reason="L['x'] size[0] expected 8, got 16")],
             "recompiles": [{"entry": 1, "guard": "L['x'] size[0] expected 8, got 16"}],
             "limit": None},
            {"id": 9, "qualname": "step", "filename": "/src/train.py", "firstlineno": 3,
             "source": None, "breaks": [], "entries": [make_entry(0, kernels=[], graph="")],
             "recompiles": [], "limit": "step reached the recompile limit (8): L['n'] == 3 failed"},
        ],
        "check": {"graphs_checked": 3, "divergences": [
            {"code_id": 7, "entry": 1, "kernel": "k0", "value": 5, "dtype": "f32",
             "max_abs_err": 0.5, "max_rel_err": 0.1, "atol": 1e-5, "rtol": 1.3e-6,
             "inputs_file": "/tmp/fd_inputs_7_1.pt", "detail": "relu output differs"}]},
        "omitted": ["kernel code of 2 kernels not recorded"],
    }


class Element:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent = tag, dict(attrs), parent
        self.children, self.text = [], []

    @property
    def classes(self):
        return (self.attrs.get("class") or "").split()

    def has(self, *classes):
        return all(c in self.classes for c in classes)

    def all_text(self):
        return "".join(self.text) + "".join(c.all_text() for c in self.children)

    def iter(self):
        yield self
        for c in self.children:
            yield from c.iter()

    def find(self, tag=None, cls=(), **attrs):
        cls = (cls,) if isinstance(cls, str) else cls
        return [e for e in self.iter() if (tag is None or e.tag == tag) and e.has(*cls)
                and all(e.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def ancestor(self, tag):
        e = self.parent
        while e is not None and e.tag != tag:
            e = e.parent
        return e


class Tree(HTMLParser):
    VOID = {"meta", "br", "img", "link", "input", "hr", "path", "rect"}

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.root = Element("#root", {}, None)
        self.cur = self.root
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        e = Element(tag, attrs, self.cur)
        self.cur.children.append(e)
        if tag not in self.VOID:
            self.cur = e

    def handle_startendtag(self, tag, attrs):
        self.cur.children.append(Element(tag, attrs, self.cur))

    def handle_endtag(self, tag):
        e = self.cur
        while e is not None and e.tag != tag:
            e = e.parent
        if e is not None:
            self.cur = e.parent

    def handle_data(self, data):
        self.cur.text.append(data)


def parse(data, **kw):
    text = report_html.render(data, **kw)
    return text, Tree(text).root


def by_id(root, id_):
    (e,) = [e for e in root.iter() if e.attrs.get("id") == id_]
    return e


def test_break_markers_on_source_lines_with_reasons_and_fixes():
    _, root = parse(make_data())
    marks = root.find(cls="break")
    assert len(marks) == 3
    line12 = by_id(root, "code7-L12")
    (m12,) = line12.find("span", "break")
    assert m12.attrs["data-line"] == "12" and "print" in m12.attrs["title"]
    assert line12.has("has-break") and "print('y <b>&'" in line12.all_text()
    (m14,) = by_id(root, "code7-L14").find("span", "break", data_line="14")
    assert m14.attrs["title"] == "a branch depends on a tensor's value"
    note_rows = root.find("tr", "break-note")
    assert len(note_rows) == 2
    assert "move it out of the hot function" in note_rows[0].find(cls="fix")[0].all_text()
    assert "torch.where" in note_rows[1].find(cls="fix")[0].all_text()
    # the break in inlined code of another file is listed with its file:line
    (other,) = root.find("li", "break")
    assert other.attrs["data-file"] == "/src/util.py" and other.attrs["data-line"] == "99"
    assert "/src/util.py:99" in other.all_text() and "Tensor.item()" in other.all_text()
    assert by_id(root, "code7-L11").find(cls="break") == []


def test_fix_table():
    assert report_html.fix_for("call to <built-in function print> is not supported").startswith("Print")
    assert "torch.where" in report_html.fix_for("a branch depends on a tensor's value")
    assert "Python number" in report_html.fix_for("Tensor.item() depends on tensor data")
    assert "no_grad" in report_html.fix_for("torch.set_grad_enabled inside the loop")
    assert "fastdyn.skip" in report_html.fix_for("call to <built-in method foo> is not supported")
    assert report_html.fix_for("KeyError: 20") is None
    assert len(report_html.FIXES) <= 10


def test_graph_svg_nodes_edges_and_kernels():
    data = make_data()
    _, root = parse(data)
    svgs = root.find("svg", "graph")
    assert [(s.attrs["data-code"], s.attrs["data-entry"]) for s in svgs] == [("7", "0"), ("7", "1")]
    svg = svgs[0]
    ops = svg.find("g", ("node", "op"))
    assert [o.attrs["data-value"] for o in ops] == ["3", "4", "5", "6", "8", "9"]
    assert ops[3].attrs["data-values"] == "6 7"
    assert ops[0].has("extern") and ops[1].has("fused") and ops[5].has("plain")
    assert "add.Tensor" in ops[1].all_text() and "f32[8, 32]" in ops[1].all_text()
    assert "model.py:11" in ops[0].find("title")[0].all_text()
    inputs = svg.find("g", ("node", "input"))
    assert [i.attrs["data-value"] for i in inputs] == ["0", "1", "2"]
    assert "L['x']" in inputs[0].all_text()
    outputs = svg.find("g", ("node", "output"))
    assert [o.attrs["data-value"] for o in outputs] == ["8", "9", "7"]
    kernels = svg.find("g", "kernel")
    assert [k.attrs["data-kernel"] for k in kernels] == ["k0", "k1"]
    assert all(k.find("rect") for k in kernels)
    edges = {(p.attrs["data-from"], p.attrs["data-to"]) for p in svg.find("path", "edge")}
    assert {("0", "3"), ("1", "3"), ("3", "4"), ("2", "4"), ("5", "6"), ("6", "9"), ("3", "8"),
            ("8", "8"), ("7", "7")} <= edges
    assert ("6", "7") not in edges   # %7 is max.dim's second output, read by output 2
    # every marker reference resolves inside its own svg
    (marker,) = svg.find("marker")
    assert all(p.attrs["marker-end"] == f"url(#{marker.attrs['id']})" for p in svg.find("path", "edge"))
    # the entry without a graph has no svg; diverged kernel k0 of entry 1 is highlighted
    assert svgs[1].find("g", ("kernel", "diverged"), data_kernel="k0")


def test_graph_reader_never_crashes_and_layout_keeps_nodes_apart():
    text = ("graph(%0: f32[s0, 256]{256, 1}):\n  symbols(s0 = %0[0])\n"
            "  %1: f32[s0, 256]{256, 1} = aten::neg(%0)\n"
            "  something odd <here> & there\n  %2 = weird\n  %3: f32[]{} = aten::sum(%1)\n"
            "  return (%3)")
    entry = make_entry(0, kernels=[], graph=text)
    entry["node_locations"] = ["model.py:3", "model.py:4", "model.py:5", "model.py:6"]
    data = make_data()
    data["codes"][0]["entries"] = [entry]
    _, root = parse(data)
    (svg,) = root.find("svg", "graph")
    inputs = svg.find("g", ("node", "input"))
    assert [i.attrs["data-value"] for i in inputs] == ["0"]
    assert "f32[s0, 256]" in inputs[0].all_text() and "{256" not in inputs[0].find("text")[1].all_text()
    ops = svg.find("g", ("node", "op"))
    # the size symbols' line is no node, so each node keeps its own Python line
    assert len(ops) == 4 and ops[0].has("plain") and "@ model.py:3" in ops[0].find("title")[0].all_text()
    assert ops[1].has("opaque") and "something odd <here>" in ops[1].find("title")[0].all_text()
    assert "@ model.py:4" in ops[1].find("title")[0].all_text()
    assert ops[2].has("opaque") and ops[2].attrs["data-value"] == "2"   # "%2 = weird": a value, no op name
    assert ops[3].attrs["data-value"] == "3" and "@ model.py:6" in ops[3].find("title")[0].all_text()
    assert [o.attrs["data-value"] for o in svg.find("g", ("node", "output"))] == ["3"]
    edges = {(p.attrs["data-from"], p.attrs["data-to"]) for p in svg.find("path", "edge")}
    assert edges == {("0", "1"), ("1", "3"), ("3", "3")}
    boxes = [(float(r.attrs["x"]), float(r.attrs["y"])) for g in svg.find("g", "node")
             for r in g.find("rect")]
    for i, (x, y) in enumerate(boxes):
        for x2, y2 in boxes[i + 1:]:
            assert abs(x - x2) >= report_html.NW or abs(y - y2) >= report_html.NH
    # whatever the text, a picture comes back
    for junk in ("", "graph(", "return", "%", "%99999999999999999999999 = f(%1)", "graph(%0: \u00e9\u00e9)\n  x = \u2603(%0)",
                 "graph(%0)\n  %1: f32 = aten::add(%0, %0)\n  %1: f32 = aten::add(%1, %1)\n  return (%1, %1)"):
        entry["graph_text"] = junk
        _, root = parse(data)
        assert root.find("svg", "graph") or not junk


def test_graph_node_cap():
    lines = ["graph(%0: f32[4]{1}):"] + [f"  %{i + 1}: f32[4]{{1}} = aten::neg(%{i})" for i in range(500)]
    entry = make_entry(0, kernels=[], graph="\n".join(lines + ["  return (%500)"]))
    data = make_data()
    data["codes"][0]["entries"] = [entry]
    _, root = parse(data)
    (svg,) = root.find("svg", "graph")
    assert len(svg.find("g", ("node", "op"))) == 400
    assert "500 ops" in root.find("p", "graph-cap")[0].all_text()


def test_guards_recompiles_and_limit():
    _, root = parse(make_data())
    entry0 = by_id(root, "code7-e0")
    guards = entry0.find("li", "guard")
    assert len(guards) == 2 and "size=[8, 16]" in guards[0].all_text()
    (row,) = root.find("tr", "recompile")
    assert row.attrs["data-entry"] == "1" and "expected 8, got 16" in row.all_text()
    assert "expected 8, got 16" in by_id(root, "code7-e1").find(cls="recompile-reason")[0].all_text()
    (limit,) = root.find("p", "limit")
    assert "recompile limit" in limit.all_text() and limit.ancestor("details").attrs["id"] == "code9"


def test_kernel_blocks_and_source_links():
    _, root = parse(make_data())
    k0 = by_id(root, "code7-e0-k0")
    assert k0.tag == "details" and k0.has("kernel-code")
    assert "%0 = Load v3" in k0.find("pre", "kernel-ir")[0].all_text()
    assert "define void @k0" in k0.find("pre", "kernel-generated")[0].all_text()
    assert [a.attrs["href"] for a in k0.find("a")] == ["#code7-L11", "#code7-L13"]
    k1 = by_id(root, "code7-e0-k1")
    assert k1.find("pre", "kernel-ir") and not k1.find("pre", "kernel-generated")
    assert "kernel k0 outer[8]" in by_id(root, "code7-e0").find("pre", "program")[0].all_text()


def test_timings_stats_header_toc():
    _, root = parse(make_data())
    (timings,) = by_id(root, "code7-e0").find("table", "timings")
    rows = [r.all_text() for r in timings.find("tr")[1:]]
    assert [r.split("\n")[0] for r in rows] and rows[0].startswith("trace") and "12.000" in rows[3]
    assert "14.25 ms" in by_id(root, "code7-e0").find(cls="compile-time")[0].all_text()
    (stats,) = root.find("table", "stats")
    cells = {r.find("th")[0].all_text(): r.find("td")[0].all_text() for r in stats.find("tr")}
    assert cells == {"frames_seen": "12", "graphs": "3", "graph_breaks": "3",
                     "compile_seconds": "0.0421"}
    counts = {r.attrs["data-count"]: r.find("td")[0].all_text() for r in root.find("tr")
              if "data-count" in r.attrs}
    assert counts["code objects"] == "2" and counts["graphs"] == "2" and counts["graph breaks"] == "3"
    assert counts["recompiles"] == "1" and counts["kernels"] == "4"
    assert [a.attrs["href"] for a in by_id(root, "toc").find("a")] == ["#code7", "#code9"]
    assert "llvm_cpu" in root.find("table", "fastdyn-info")[0].all_text()
    assert root.find("h1")[0].all_text() == "fastdyn report: python train.py"


def test_check_section_names_diverging_kernel():
    _, root = parse(make_data())
    (row,) = root.find("tr", "divergence")
    assert row.attrs["data-kernel"] == "k0" and row.attrs["data-code"] == "7"
    text = row.all_text()
    assert "Model.forward" in text and "0.5" in text and "1e-05" in text and "/tmp/fd_inputs_7_1.pt" in text
    assert "#code7-e1-k0" in [a.attrs["href"] for a in row.find("a")]
    assert by_id(root, "code7-e1-k0").has("diverged") and not by_id(root, "code7-e0-k0").has("diverged")
    data = make_data()
    del data["check"]
    assert not parse(data)[1].find(id="check")


def test_escaping_of_user_text():
    data = make_data()
    data["codes"][0]["source"][1] = "    y = '</script><script>alert(1)</script>'  # \"q\" & <b>\n"
    data["codes"][0]["breaks"][0]["reason"] = 'bad "reason" <script>x</script>'
    data["codes"][0]["entries"][0]["guards"][0] = "L['x'] < 3 && <img src=x onerror=alert(1)>"
    text, root = parse(data)
    scripts = root.find("script")
    assert len(scripts) == 1 and "alert" not in scripts[0].all_text()
    assert not root.find("img") and not by_id(root, "code7-L11").find("b")
    assert "</script><script>alert(1)</script>" in by_id(root, "code7-L11").all_text()
    assert root.find("span", "break", data_line="12")[0].attrs["title"] == 'bad "reason" <script>x</script>'
    assert "&lt;img src=x" in text


def test_no_external_resources():
    text, root = parse(make_data())
    for e in root.iter():
        for attr in ("src", "href", "xlink:href", "action"):
            v = e.attrs.get(attr) or ""
            assert not v.startswith(("http:", "https:", "//")), (e.tag, attr, v)
    assert "@import" not in text and "url(http" not in text and not root.find("link")
    assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")


def test_size_bound_cuts_generated_code_with_visible_notes():
    data = make_data()
    big = "\n".join(f"  %{i} = add i32 %{i - 1}, 1 ; <&>" for i in range(1_200_000))   # ~50 MB
    assert len(big) > 40_000_000
    data["codes"][0]["entries"][0]["kernels"][0]["code"] = big
    text, root = parse(data, max_bytes=2_000_000)
    assert len(text.encode("utf-8")) <= 2_000_000
    notes = [p.all_text() for p in root.find("p", "omitted")]
    assert any("generated code" in n for n in notes) and any("see the end" in n for n in notes)
    gen = by_id(root, "code7-e0-k0").find("pre", "kernel-generated")[0].all_text()
    assert "more lines (" in gen and "left out" in gen and gen.startswith("  %0 = add i32 %-1, 1 ; <&>")
    # the rest of the report is still there
    assert len(root.find("svg", "graph")) == 2 and root.find("tr", "divergence")
    assert "kernel code of 2 kernels not recorded" in notes


@pytest.mark.parametrize("bound", [300_000, 60_000, 5_000])
def test_size_bound_holds_for_any_input(bound):
    data = make_data()
    code = data["codes"][0]
    code["source"] = [f"    x = x + {i}  # {'<' * 50}\n" for i in range(5000)]
    code["breaks"] = [{"filename": "/src/model.py", "lineno": 10 + i, "reason": "r" * 500,
                       "continued": True} for i in range(3000)]
    entry = code["entries"][0]
    entry["guards"] = [f"guard {i} " + "x" * 200 for i in range(5000)]
    entry["kernels"] = [dict(entry["kernels"][0], name=f"k{i}", loop_ir="ir\n" * 3000,
                             code="c" * 100_000) for i in range(50)]
    data["codes"] += [dict(copy.deepcopy(data["codes"][1]), id=100 + i) for i in range(300)]
    data["title"] = "t" * 100_000
    text, root = parse(data, max_bytes=bound)
    assert len(text.encode("utf-8")) <= bound
    assert root.find("p", "omitted")


def test_empty_and_sparse_input():
    text, root = parse({})
    assert root.find("table", "stats") and not root.find("svg")
    text, root = parse({"codes": [{"id": 1, "qualname": "f", "entries": [{"index": 0,
                                                                          "graph_text": "garbage"}]}]})
    (svg,) = root.find("svg", "graph")
    assert len(svg.find("g", ("node", "op"))) == 1


def test_write(tmp_path):
    path = tmp_path / "r.html"
    assert report_html.write(make_data(), str(path)) == str(path)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_many_codes_collapse_beyond_first_few():
    data = make_data()
    data["codes"] += [dict(copy.deepcopy(data["codes"][1]), id=100 + i) for i in range(5)]
    _, root = parse(data)
    codes = root.find("details", "code")
    assert len(codes) == 7 and ["open" in c.attrs for c in codes] == [True] * 3 + [False] * 4
