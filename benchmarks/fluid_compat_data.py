"""Synthetic stand-ins for `paddle.dataset` readers, for running Paddle's tests offline.

Paddle's readers download their data; these yield samples of the same format (types, shapes,
value ranges, dictionary layout) drawn from a fixed seed, with a learnable structure (classes
with their own prototypes, a linear target, a repeating word sequence) so that the book's
training loops reach their loss/accuracy thresholds. They are not the real data sets: a
figure measured on them says the program runs and learns, nothing about real accuracy.

`install()` registers them as `paddle.dataset` (after runtime.compat.install()).
"""

import os
import sys
import types

import numpy as np

_TRAIN, _TEST = 0, 1


def _rng(seed, split):
    return np.random.default_rng(1000 * seed + split)


# --- uci_housing: 13 normalised features -> a price ------------------------------------------
def _housing(split, n):
    rng = _rng(1, split)
    weights = np.random.default_rng(1).uniform(-8, 8, 13)
    def reader():
        for _ in range(n):
            x = rng.uniform(-0.5, 0.5, 13).astype("float32")
            y = np.array([x @ weights + 22.5 + rng.normal(0, 1.0)], dtype="float32")
            yield x, y
    return reader


# --- classification images: mnist [784] in [-1, 1], cifar [3072] in [0, 1] -------------------
def _images(seed, split, n, size, classes, low, high):
    protos = np.random.default_rng(seed).uniform(low, high, (classes, size)).astype("float32")
    rng = _rng(seed, split)
    def reader():
        for _ in range(n):
            label = int(rng.integers(classes))
            noise = rng.normal(0, 0.3 * (high - low), size).astype("float32")
            yield np.clip(protos[label] + noise, low, high).astype("float32"), label
    return reader


# --- imikolov: a word dictionary and n-grams of ids -----------------------------------------
_VOCAB = 120


def _build_dict(min_word_freq=50):
    words = {f"w{i}": i for i in range(_VOCAB - 3)}
    words.update({"<s>": _VOCAB - 3, "<e>": _VOCAB - 2, "<unk>": _VOCAB - 1})
    return words


def _ngrams(split, word_idx, n, data_type=1):
    rng = _rng(3, split)
    size = len(word_idx)
    def reader():
        for _ in range(2000 if split == _TRAIN else 200):
            start = int(rng.integers(size))
            step = 1 + start % 3
            yield tuple((start + step * i) % size for i in range(n))
    return reader


# --- imdb: a word dictionary and reviews (lists of word ids) with a 0/1 label ---------------
_IMDB_VOCAB = 300


def _imdb_dict():
    words = {f"w{i}": i for i in range(_IMDB_VOCAB - 1)}
    words["<unk>"] = _IMDB_VOCAB - 1
    return words


def _reviews(split, word_idx, n):
    """Label 1 when most words come from the upper half of the dictionary."""
    rng = _rng(7, split)
    size = len(word_idx)
    def reader():
        for _ in range(n):
            label = int(rng.integers(2))
            length = int(rng.integers(5, 30))
            low, high = (size // 2, size) if label else (0, size // 2)
            words = rng.integers(low, high, length)
            noise = rng.integers(0, size, length)
            mixed = np.where(rng.random(length) < 0.2, noise, words)
            yield [int(w) for w in mixed], label
    return reader


# --- wmt14: (source ids, target ids, next target ids) over dictionaries of dict_size words --
_WMT_SPECIAL = ("<s>", "<e>", "<unk>")  # ids 0, 1, 2 as in Paddle's dictionaries


def _wmt14_dict(dict_size, reverse=True):
    """(source dict, target dict): word -> id, or id -> word when reverse (Paddle's default)."""
    def one(prefix):
        words = list(_WMT_SPECIAL) + [f"{prefix}{i}" for i in range(dict_size - 3)]
        table = {w: i for i, w in enumerate(words[:dict_size])}
        return {i: w for w, i in table.items()} if reverse else table
    return one("s"), one("t")


def _wmt14(split, dict_size, n, seed=7, trg_dict_size=None):
    """Sentences of 3-12 words; the target is a fixed word-by-word translation of the source,
    reversed (something to learn); both framed as Paddle frames them: the source in <s> ...
    <e>, the target input after <s>, the next-word target before <e>."""
    rng = _rng(seed, split)
    trg_size = trg_dict_size or dict_size
    mapping = np.random.default_rng(seed).integers(3, trg_size, dict_size)
    def reader():
        for _ in range(n):
            words = rng.integers(3, dict_size, int(rng.integers(3, 13)))
            target = [int(mapping[w]) for w in words[::-1]]
            yield [0] + [int(w) for w in words] + [1], [0] + target, target + [1]
    return reader


def _wmt16_dict(lang, dict_size, reverse=False):
    """Paddle's wmt16.get_dict: word -> id (id -> word when reverse), <s> <e> <unk> first."""
    words = list(_WMT_SPECIAL) + [f"{lang}{i}" for i in range(dict_size - 3)]
    table = {w: i for i, w in enumerate(words[:dict_size])}
    return {i: w for w, i in table.items()} if reverse else table


def _wmt16(split, n):
    def make(src_dict_size, trg_dict_size, src_lang="en"):
        if src_lang not in ("en", "de"):
            raise ValueError("An error language type. Only support: en (for English); de(for "
                             "Germany).")
        return _wmt14(split, src_dict_size, n, seed=9, trg_dict_size=trg_dict_size)
    return make


# --- conll05: semantic-role features of sentences around their verb --------------------------
_SRL_WORDS, _SRL_VERBS, _SRL_TAGS = 200, 20, ("A0", "A1", "A2", "AM-TMP", "V")


def _conll05_dict():
    """(word dict, verb dict, label dict) as Paddle's get_dict: word -> id; labels B-<tag>,
    I-<tag> for each tag, then O."""
    words = {"<unk>": 0, "bos": 1, "eos": 2}
    words.update({f"w{i}": i for i in range(3, _SRL_WORDS)})
    verbs = {f"v{i}": i for i in range(_SRL_VERBS)}
    labels = {}
    for tag in _SRL_TAGS:
        labels[f"B-{tag}"] = len(labels)
        labels[f"I-{tag}"] = len(labels)
    labels["O"] = len(labels)
    return words, verbs, labels


def _conll05_embedding():
    """A file in the layout of Paddle's emb file: a 16-byte header, then float32 [words, 32]."""
    import tempfile
    path = os.path.join(tempfile.gettempdir(), f"fluid_compat_conll05_emb_{os.getpid()}")
    vectors = np.random.default_rng(8).normal(0, 0.1, (_SRL_WORDS, 32)).astype("float32")
    with open(path, "wb") as f:
        f.write(b"\0" * 16)
        vectors.tofile(f)
    return path


def _conll05(split, n):
    """Sentences of 4-12 words, one verb each: the words before it are A0, those after A1 (a
    word from the first tenth of the vocabulary is AM-TMP instead), in Paddle's nine features:
    words, the five context words around the verb (repeated per word), the verb, the 0/1 mark
    of the verb's +-2 window, the labels."""
    words_of, verbs_of, labels_of = _conll05_dict()
    rng = _rng(8, split)
    def reader():
        for _ in range(n):
            size = int(rng.integers(4, 13))
            sentence = [int(w) for w in rng.integers(3, _SRL_WORDS, size)]
            at = int(rng.integers(size))
            labels, previous = [], None
            for i, w in enumerate(sentence):
                tag = "V" if i == at else ("AM-TMP" if w < _SRL_WORDS // 10 else
                                           ("A0" if i < at else "A1"))
                labels.append(labels_of[("I-" if tag == previous else "B-") + tag])
                previous = tag
            def around(k, edge):
                return sentence[at + k] if 0 <= at + k < size else words_of[edge]
            context = [[around(k, "bos" if k < 0 else "eos")] * size for k in (-2, -1, 0, 1, 2)]
            mark = [1 if abs(i - at) <= 2 else 0 for i in range(size)]
            verb = [int(rng.integers(_SRL_VERBS))] * size
            yield (sentence, *context, verb, mark, labels)
    return reader


def _cycled(make):
    """`make(cycle=True)` repeats the data set forever, as Paddle's cifar readers do."""
    def factory(cycle=False):
        reader = make()
        if not cycle:
            return reader
        def forever():
            while True:
                yield from reader()
        return forever
    return factory


def _module(name, **functions):
    module = types.ModuleType(name, f"{name}: synthetic data (benchmarks/fluid_compat_data.py)")
    for key, value in functions.items():
        setattr(module, key, value)
    return module


def _no_download(*args, **kwargs):
    raise RuntimeError("paddle.dataset.common.download: no network in this measurement")


def modules():
    """{module name: module} for the paddle.dataset package and its data sets."""
    ds = "paddle.dataset"
    built = {
        "uci_housing": _module(f"{ds}.uci_housing", train=lambda: _housing(_TRAIN, 404),
                               test=lambda: _housing(_TEST, 102), feature_names=[
                                   "CRIM", "ZN", "INDUS", "CHAS", "NOX", "RM", "AGE", "DIS",
                                   "RAD", "TAX", "PTRATIO", "B", "LSTAT"]),
        "mnist": _module(f"{ds}.mnist",
                         train=lambda: _images(4, _TRAIN, 2048, 784, 10, -1.0, 1.0),
                         test=lambda: _images(4, _TEST, 256, 784, 10, -1.0, 1.0)),
        "cifar": _module(f"{ds}.cifar",
                         train10=_cycled(lambda: _images(5, _TRAIN, 1024, 3072, 10, 0, 1)),
                         test10=_cycled(lambda: _images(5, _TEST, 256, 3072, 10, 0, 1)),
                         train100=lambda: _images(6, _TRAIN, 1024, 3072, 100, 0, 1),
                         test100=lambda: _images(6, _TEST, 256, 3072, 100, 0, 1)),
        "imikolov": _module(f"{ds}.imikolov", build_dict=_build_dict,
                            train=lambda word_idx, n, data_type=1: _ngrams(_TRAIN, word_idx, n),
                            test=lambda word_idx, n, data_type=1: _ngrams(_TEST, word_idx, n)),
        "imdb": _module(f"{ds}.imdb", word_dict=_imdb_dict,
                        train=lambda word_idx: _reviews(_TRAIN, word_idx, 1000),
                        test=lambda word_idx: _reviews(_TEST, word_idx, 200)),
        "wmt14": _module(f"{ds}.wmt14", get_dict=_wmt14_dict,
                         train=lambda dict_size: _wmt14(_TRAIN, dict_size, 512),
                         test=lambda dict_size: _wmt14(_TEST, dict_size, 128),
                         gen=lambda dict_size: _wmt14(_TEST, dict_size, 128),
                         START="<s>", END="<e>", UNK="<unk>", UNK_IDX=2),
        "wmt16": _module(f"{ds}.wmt16", get_dict=_wmt16_dict, train=_wmt16(_TRAIN, 64),
                         test=_wmt16(_TEST, 32), validation=_wmt16(_TEST, 32)),
        "conll05": _module(f"{ds}.conll05", get_dict=_conll05_dict,
                           get_embedding=_conll05_embedding, test=lambda: _conll05(_TRAIN, 400),
                           UNK_IDX=0),
        "common": _module(f"{ds}.common", download=_no_download, DATA_HOME="/nonexistent"),
    }
    package = _module(ds, **built)
    package.__path__ = []
    out = {ds: package}
    out.update({f"{ds}.{key}": mod for key, mod in built.items()})
    return out


def install():
    paddle = sys.modules["paddle"]
    for name, module in modules().items():
        sys.modules.setdefault(name, module)
    paddle.dataset = sys.modules["paddle.dataset"]
