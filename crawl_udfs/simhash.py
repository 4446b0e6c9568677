"""SimHash: a 64-bit fingerprint whose Hamming distance tracks text similarity.

Guarantees: :func:`simhash` is deterministic across processes and platforms,
never raises on any ``str``, and returns a *signed* 64-bit integer (it fits a
Spark ``LongType`` column as is); the empty text (no word at all) hashes to
the constant :data:`EMPTY` (0). :func:`hamming` counts differing bits of two
such values, whatever their sign.

Algorithm: Charikar's random-hyperplane fingerprint (M. Charikar, "Similarity
estimation techniques from rounding algorithms", STOC 2002) as used for web
near-duplicate detection by G. S. Manku, A. Jain and A. Das Sarma, "Detecting
Near-Duplicates for Web Crawling", WWW 2007 (64-bit fingerprints, k = 3 bits).
Each feature is hashed to 64 bits; bit ``b`` of the fingerprint is 1 when the
summed weight of features with bit ``b`` set exceeds that of features with it
clear (ties give 0).

Features here: the text is lower-cased and split into words (Unicode-aware:
runs of letters/digits/marks; each Han, Kana or Thai character is a word of
its own, since those scripts do not separate words by spaces); a word made
only of digits becomes ``#``, because dates, times and counters are the most
volatile part of a page and should not make two copies of one article differ.
Words are shingled into overlapping word n-grams (``simhash.shingle_words``;
a text shorter than that is one shingle) and each shingle, its words joined by
one space, is hashed with XXH64 (seed 0). A feature's weight is its number of
occurrences.

Shingle size, measured at k = 3 on 400-word texts (200 generated articles,
and 167 sections cut from the Python reference manual): share of one-edit
near-duplicates found (a changed month, an added "Printed from" line, one
word replaced), and the closest pair of different generated articles:
1 word (bag of words, closest to Manku et al.'s weighted terms) 97-100 %,
4 bits; 2 words 80-97 %, 15 bits; 4 words 71-81 %, 16 bits. On the manual,
1-word SimHash also put 6 section pairs within 3 bits, some only ~60 %
overlapping; 2-word put 2. Small edits move a 4-shingle SimHash of a short
text by ~2.5 bits on average, so k = 3 misses a fifth to a quarter of them;
2 (the default) keeps different texts as far apart and finds more.

Speed: no Python bytecode runs per word or per shingle of ASCII text. The
tokens are UTF-8 ``bytes`` (what is hashed): the text's bytes, every ASCII
non-word byte turned into a space by one ``bytes.translate``, split on spaces
(a third of ``findall``'s time); a piece holding non-ASCII bytes is decoded and
split by the ``str`` rule (:func:`words`), so the tokens are exactly
:func:`words`' tokens, encoded (``\\w`` is ``str.isalnum`` or ``_`` for every
code point, and the separators cut no token). All-digit words are swapped by a
``dict.get`` map; shingles are joined and hashed by ``map`` chains of C
functions feeding ``numpy.fromiter``; the per-bit sums run over a numpy (shingles x 64) bit
matrix (``unpackbits`` of the hashes' bytes), in chunks so memory stays
bounded on multi-megabyte texts, and the result bits are packed back by
``packbits``. ~0.1 ms for a 170-word page (about half of it tokenising),
against ~3 ms for a Python loop over the 64 bits of each shingle.
"""

from __future__ import annotations

import re
from itertools import islice

import numpy as np
import xxhash


__all__ = ["EMPTY", "simhash", "simhash_of", "hamming", "words", "shingles", "shingled"]

EMPTY = 0
"""The SimHash of a text with no words (documented constant)."""

_MASK = (1 << 64) - 1
_CHUNK = 1 << 16  # shingles per bit-matrix chunk: 64 Ki x 64 B = 4 MiB

# Scripts written without spaces between words: each character is a token.
_NOSPACE = "\u0e00-\u0e7f\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f"
_WORD = re.compile(rf"[{_NOSPACE}]|[^\W{_NOSPACE}]+")
_PLAIN_WORD = re.compile(r"\w+")  # same tokens when no space-less script is present, ~30 % faster
_ASCII_WORD = re.compile(r"[a-z0-9_]+")  # ``\w+`` on lower-cased ASCII text, ~25 % faster again
_HAS_NOSPACE = re.compile(rf"[{_NOSPACE}]")
# Every ASCII byte that is not a word character (``\w``) becomes a space; bytes >= 0x80 are kept.
_SEPARATE = bytes(b if b >= 0x80 or chr(b).isalnum() or b == 0x5F else 0x20 for b in range(256))


def words(text: str) -> list[str]:
    """The tokens SimHash shingles: lower-cased words, all-digit words as ``#``."""
    text = text.lower()
    if text.isascii():
        pattern = _ASCII_WORD
    else:
        pattern = _WORD if _HAS_NOSPACE.search(text) else _PLAIN_WORD
    tokens = pattern.findall(text)
    numbers = dict.fromkeys(filter(str.isdecimal, tokens), "#")
    return list(map(numbers.get, tokens, tokens)) if numbers else tokens


def _word_bytes(text: str) -> list[bytes]:
    """:func:`words` UTF-8 encoded; raises UnicodeEncodeError on a lone surrogate."""
    raw = text.lower().encode("utf-8")
    pieces = raw.translate(_SEPARATE).split()
    if not raw.isascii():
        pieces = [w for p in pieces for w in ((p,) if p.isascii() else map(str.encode, words(p.decode("utf-8"))))]
    numbers = dict.fromkeys(filter(bytes.isdigit, pieces), b"#")  # ASCII digits: str.isdecimal of ASCII
    return list(map(numbers.get, pieces, pieces)) if numbers else pieces


def _shingles(tokens: list, n: int, sep=" "):
    if len(tokens) <= n:
        return iter((sep.join(tokens),))
    if n == 2:
        return map(sep.join, zip(tokens, islice(tokens, 1, None)))
    return map(sep.join, zip(*(islice(tokens, i, None) for i in range(n))))


def _tokens(text: str) -> list[bytes]:
    """:func:`words` as the UTF-8 bytes that are hashed."""
    try:
        return _word_bytes(text)
    except UnicodeEncodeError:  # a lone surrogate: hash its UTF-8-with-surrogates bytes, as always
        return [w.encode("utf-8", "surrogatepass") for w in words(text)]


def shingles(text: str, shingle_words: int) -> list[bytes]:
    """The features of ``text`` (its word n-grams, UTF-8, words joined by one space), in order with
    repeats; [] for a text with no words. The one feature rule: :func:`simhash` hashes these, and
    :mod:`crawl_udfs.near_dup` MinHashes the set of them."""
    return shingled(text, shingle_words)[1]


def shingled(text: str, shingle_words: int) -> tuple[int, list[bytes]]:
    """(number of :func:`words`, :func:`shingles`) of ``text``, tokenised once: what a page's
    SimHash, MinHash and word count are made of (``crawl_udfs.pages``)."""
    tokens = _tokens(text)
    return len(tokens), (list(_shingles(tokens, int(shingle_words), b" ")) if tokens else [])


def simhash(text: str, shingle_words: int) -> int:
    """The signed 64-bit SimHash of ``text``; ``shingle_words`` (>= 1) is ``simhash.shingle_words``."""
    n = int(shingle_words)
    tokens = _tokens(text)
    if not tokens:
        return EMPTY
    total = len(tokens) - n + 1 if len(tokens) > n else 1
    return _simhash_hashes(np.fromiter(map(xxhash.xxh64_intdigest, _shingles(tokens, n, b" ")),
                                       dtype=np.uint64, count=total))


def simhash_of(features: list[bytes]) -> int:
    """The SimHash of a text's :func:`shingles` (in order, with repeats): ``simhash(text, n) ==
    simhash_of(shingles(text, n))``."""
    if not features:
        return EMPTY
    return _simhash_hashes(np.fromiter(map(xxhash.xxh64_intdigest, features), dtype=np.uint64,
                                       count=len(features)))


def _simhash_hashes(hashes: np.ndarray) -> int:
    """Charikar's fingerprint of the features' 64-bit hashes, weighted by occurrence."""
    total = len(hashes)
    ones = np.zeros(64, dtype=np.int64)
    for start in range(0, total, _CHUNK):
        chunk = hashes[start : start + _CHUNK].astype("<u8", copy=False)
        bits = np.unpackbits(chunk.view(np.uint8).reshape(-1, 8), axis=1, bitorder="little")
        ones += bits.sum(axis=0, dtype=np.int64)
    # bit b is set when more shingles have it set than clear: ones > total - ones
    value = int(np.packbits(2 * ones > total, bitorder="little").view("<u8")[0])
    return value - (1 << 64) if value >= 1 << 63 else value


def hamming(a: int, b: int) -> int:
    """Number of differing bits between two 64-bit SimHashes (signed or unsigned)."""
    return ((a ^ b) & _MASK).bit_count()
