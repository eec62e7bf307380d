"""The SSA graph of runtime/parallel: read-after-write, write-after-read and write-after-write
dependencies on hand-built programs, inplace waits, combine ops and the Reduce placement."""

import numpy as np
import pytest

import runtime as fluid
from test_parallel_models import build, strategy
from runtime.errors import EnforceNotMet
from runtime.parallel.builder import build as build_graph
from runtime.plan import Plan


def _graph(program, feed, fetch, n=1, bs=None, loss=None, gc=False, inplace=False):
    plans = [Plan(program, sorted(feed), fetch, np, fluid.CPUPlace(), gc, inplace)
             for _ in range(n)]
    freeable = {(p, s) for p, plan in enumerate(plans) for st in plan.steps
                for s in st.frees + st.shrinks} if gc else set()
    return build_graph(program, plans, bs or fluid.BuildStrategy(), loss, freeable)


def _deps(graph):
    """{program op index: sorted program op indices it waits for} (place 0's op nodes)."""
    nodes = graph.nodes
    return {n.index: sorted(nodes[d].index for d in n.deps) for n in nodes if n.place == 0}


def _program():
    """x fed; a = 2x; b = 3x; c = a + b; a = c; d = b; b = d."""
    prog = fluid.Program()
    block = prog.global_block()
    x = block.create_var(name="x", shape=[-1, 2], dtype="float32", is_data=True)
    v = {n: block.create_var(name=n, shape=[-1, 2], dtype="float32") for n in "abcd"}
    block.append_op("scale", inputs={"X": x}, outputs={"Out": v["a"]}, attrs={"scale": 2.0})  # 0
    block.append_op("scale", inputs={"X": x}, outputs={"Out": v["b"]}, attrs={"scale": 3.0})  # 1
    block.append_op("elementwise_add", inputs={"X": v["a"], "Y": v["b"]},
                    outputs={"Out": v["c"]})  # 2: RAW on a (0) and b (1)
    block.append_op("scale", inputs={"X": v["c"]}, outputs={"Out": v["a"]},
                    attrs={"scale": 1.0})  # 3: RAW on c (2); WAW on a (0); WAR on a (read by 2)
    block.append_op("scale", inputs={"X": v["b"]}, outputs={"Out": v["d"]},
                    attrs={"scale": 1.0})  # 4: only RAW on b (1): may run beside 2 and 3
    block.append_op("scale", inputs={"X": v["d"]}, outputs={"Out": v["b"]},
                    attrs={"scale": 1.0})  # 5: RAW d (4); WAW b (1); WAR b (read by 2, 4)
    return prog


def test_raw_war_waw_edges():
    deps = _deps(_graph(_program(), ["x"], ("a", "b")))
    assert deps[0] == [] and deps[1] == []  # independent readers of the feed
    assert deps[2] == [0, 1]  # read after write
    assert deps[3] == [0, 2]  # write after write (0) and write after read + RAW (2)
    assert deps[4] == [1]
    assert deps[5] == [1, 2, 4]  # WAW on b (1), WAR on b (2, 4), RAW on d (4)


def test_the_graph_runs_like_the_program():
    prog = _program()
    x = np.array([[1.0, 2.0]], "float32")
    exe = fluid.Executor(fluid.CPUPlace())
    want = exe.run(prog, feed={"x": x}, fetch_list=["a", "b"], scope=fluid.Scope())
    es = fluid.ExecutionStrategy()
    es.num_threads = 3
    compiled = fluid.CompiledProgram(prog).with_data_parallel(exec_strategy=es,
                                                              places=fluid.cpu_places(2))
    for _ in range(5):  # scheduling order varies between runs; results must not
        got = exe.run(compiled, feed={"x": np.tile(x, (2, 1))}, fetch_list=["a", "b"],
                      scope=fluid.Scope(), return_merged=False)
        for w, per_place in zip(want, got):
            for g in per_place:
                np.testing.assert_allclose(g, w, rtol=1e-6)


def test_per_place_replicas_are_independent_and_joined_by_combine_ops():
    main, _, loss, _ = build("sgd")
    g = _graph(main, ["x", "y"], (loss.name,), n=2, loss=loss.name)
    combines = [n for n in g.nodes if n.combine]
    assert {n.type for n in combines} == {"allreduce"} and len(combines) == 6  # 3 fc: w and b
    for n in g.nodes:
        if not n.combine:
            assert all(g.nodes[d].place in (n.place, -1) for d in n.deps)
    seed = _seeds(g, loss.name)
    assert [s.ops[0].attrs["value"] for s in seed] == [0.5, 0.5]  # CoeffNumDevice: 1/places


def test_one_and_customized_gradient_scale():
    main, _, loss, _ = build("sgd")
    g = _graph(main, ["x", "y"], (loss.name,), n=2, loss=loss.name,
               bs=strategy(gradient_scale_strategy=fluid.BuildStrategy.GradientScaleStrategy.One))
    assert [n.ops[0].attrs["value"] for n in _seeds(g, loss.name)] == [1.0, 1.0]
    g = _graph(main, ["x", "y"], (loss.name,), n=2, loss=loss.name,
               bs=strategy(gradient_scale_strategy=2))
    assert not _seeds(g, loss.name)


def _seeds(graph, loss_name):
    """The nodes that write the loss's gradient seed (a fill_constant, as Paddle's)."""
    return [n for n in graph.nodes if n.type == "fill_constant"
            and n.ops[0].op.output_arg_names == [loss_name + "@GRAD"]]


def test_reduce_strategy_places_each_update_on_its_owner():
    main, _, loss, _ = build("momentum")
    g = _graph(main, ["x", "y"], (loss.name,), n=2, loss=loss.name, bs=strategy(reduce_strategy=1))
    types = [n.type for n in g.nodes if n.combine]
    assert types.count("reduce") == 6 and types.count("broadcast") == 6
    updates = [n for n in g.nodes if n.type == "momentum"]
    assert len(updates) == 6 and sorted(n.place for n in updates) == [0, 0, 0, 1, 1, 1]


def test_reduce_refuses_global_norm_clipping():
    main, _, loss, _ = build("sgd", clip=fluid.clip.GradientClipByGlobalNorm(1.0))
    with pytest.raises(EnforceNotMet, match="owned by different places.*AllReduce"):
        _graph(main, ["x", "y"], (loss.name,), n=2, loss=loss.name,
               bs=strategy(reduce_strategy=1))


def test_inplace_op_waits_for_the_other_readers():
    prog = fluid.Program()
    block = prog.global_block()
    x = block.create_var(name="x", shape=[-1, 2], dtype="float32", is_data=True)
    a, b, c = (block.create_var(name=n, shape=[-1, 2], dtype="float32") for n in "abc")
    block.append_op("scale", inputs={"X": x}, outputs={"Out": a}, attrs={"scale": 2.0})  # 0
    block.append_op("scale", inputs={"X": a}, outputs={"Out": b}, attrs={"scale": 2.0})  # 1
    block.append_op("relu", inputs={"X": a}, outputs={"Out": c})  # 2: may write c into a
    g = _graph(prog, ["x"], ("b", "c"), gc=True, inplace=True)
    relu = next(n for n in g.nodes if n.type == "relu")
    if relu.ops[0].inplace:
        assert sorted(g.nodes[d].index for d in relu.deps) == [0, 1]


def test_gc_counts_cover_every_use():
    main, _, loss, _ = build("sgd")
    g = _graph(main, ["x", "y"], (loss.name,), n=2, loss=loss.name, gc=True)
    assert g.value_count and all(v >= 1 for v in g.value_count.values())
    assert all(g.any_count[k] >= v for k, v in g.value_count.items())
