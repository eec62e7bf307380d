"""fluid.create_random_int_lodtensor, and the wmt14 stand-in of benchmarks/fluid_compat_data.py
in the format of Paddle 1.8's paddle.dataset.wmt14: dictionaries of dict_size words with
<s>, <e>, <unk> as ids 0, 1, 2 (id -> word unless reverse=False); samples (source ids in
<s> ... <e>, target ids after <s>, next-word ids before <e>)."""

import importlib.util
import os

import numpy as np

import runtime as fluid

_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "fluid_compat_data.py")


def _data_module():
    spec = importlib.util.spec_from_file_location("fluid_compat_data", _DATA)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_create_random_int_lodtensor():
    np.random.seed(0)
    t = fluid.create_random_int_lodtensor([[2, 3]], [4], fluid.CPUPlace(), low=1, high=3)
    value = np.array(t)
    assert value.shape == (5, 4) and value.dtype == np.int64
    assert value.min() >= 1 and value.max() <= 3 and set(value.ravel()) == {1, 2, 3}
    assert t.recursive_sequence_lengths() == [[2, 3]]


def test_wmt14_stand_in_format():
    wmt14 = _data_module().modules()["paddle.dataset.wmt14"]
    src, trg = wmt14.get_dict(30)
    assert len(src) == len(trg) == 30
    assert [src[i] for i in range(3)] == ["<s>", "<e>", "<unk>"]
    words, _ = wmt14.get_dict(30, reverse=False)
    assert words["<e>"] == 1
    samples = list(wmt14.train(30)())
    assert len(samples) == 512
    for source, target, target_next in samples[:50]:
        assert source[0] == 0 and source[-1] == 1 and target[0] == 0 and target_next[-1] == 1
        assert target[1:] == target_next[:-1] and len(target) == len(source) - 1
        assert all(0 <= w < 30 for w in source + target + target_next)


def test_conll05_stand_in_format():
    """Paddle's conll05: dictionaries word -> id (labels B-/I-<tag> pairs, then O), an
    embedding file (16-byte header, float32 [words, 32]) and samples of nine features, the
    verb's context repeated per word, its +-2 window marked, B-V at the verb."""
    conll05 = _data_module().modules()["paddle.dataset.conll05"]
    words, verbs, labels = conll05.get_dict()
    assert labels["O"] == len(labels) - 1 and labels["I-V"] == labels["B-V"] + 1
    with open(conll05.get_embedding(), "rb") as f:
        f.read(16)
        assert np.fromfile(f, dtype=np.float32).size == len(words) * 32
    for sample in list(conll05.test()())[:40]:
        assert len(sample) == 9
        sentence, n2, n1, v0, p1, p2, verb, mark, tags = sample
        size = len(sentence)
        assert all(len(f) == size for f in sample)
        at = tags.index(labels["B-V"])
        assert v0 == [sentence[at]] * size and len(set(verb)) == 1
        assert n1[0] == (sentence[at - 1] if at >= 1 else words["bos"])
        assert p2[0] == (sentence[at + 2] if at + 2 < size else words["eos"])
        assert mark == [int(abs(i - at) <= 2) for i in range(size)]
        assert all(0 <= w < len(words) for w in sentence)


def test_wmt16_stand_in_format():
    wmt16 = _data_module().modules()["paddle.dataset.wmt16"]
    words = wmt16.get_dict("en", 40)
    assert [words[w] for w in ("<s>", "<e>", "<unk>")] == [0, 1, 2] and len(words) == 40
    assert wmt16.get_dict("de", 40, reverse=True)[1] == "<e>"
    for source, target, target_next in list(wmt16.train(40, 30)())[:30]:
        assert source[0] == 0 and source[-1] == 1 and target[0] == 0 and target_next[-1] == 1
        assert target[1:] == target_next[:-1]
        assert all(0 <= w < 40 for w in source) and all(0 <= w < 30 for w in target_next)
