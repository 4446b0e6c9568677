"""The signature pieces of near-duplicate detection: SimHash block keys and a MinHash check.

Guarantees:
- :func:`block_keys` of two 64-bit fingerprints within ``k`` bits share at least one key
  (k + 1 blocks; ``k`` differing bits leave one block whole: the pigeonhole argument of
  G. S. Manku, A. Jain and A. Das Sarma, "Detecting Near-Duplicates for Web Crawling",
  WWW 2007). Each key carries its block's index, so equal bits in different blocks never
  meet; a key is a non-negative int that fits a signed 64-bit column. With k = 3
  (``simhash.near_duplicate_bits``): 4 blocks of 16 bits, so a lookup is an equi-join on
  the keys followed by ``hamming(a, b) <= k``.
- :func:`minhash` is a MinHash (A. Z. Broder, "On the resemblance and containment of
  documents", 1997) of the *set* of the page's shingles -- :func:`crawl_udfs.simhash.shingles`,
  the features SimHash hashes, from the same main text and word rule -- with datasketch's
  ``scheme="affine32"`` (its permutations from :data:`SEED`, XXH32 of each feature), stored as
  ``num_perm`` little-endian uint32 values: 4 bytes each, deterministic across processes. None
  for a text with no words (as SimHash's :data:`~crawl_udfs.simhash.EMPTY` is no fingerprint).
  :func:`minhash_of` applies datasketch's arithmetic (``MinHash.update_batch``, CPU path: the
  MurmurHash3 finalizer, then ``a * h + b`` in uint32) itself, in chunks, after hashing the
  features with one ``map`` instead of datasketch's per-feature Python loop: the same bytes
  (tests/test_near_dup.py compares them with datasketch's): 0.15 against 0.28 ms for a realistic
  page's ~900 features, 0.031 against 0.042 ms for a test-web page's ~170 (session 18).
- :func:`jaccard` of two stored signatures is datasketch's ``MinHash.jaccard`` (the share of
  equal values); :func:`near_duplicates` is the whole second check: the estimate at or above
  ``dedup.jaccard_threshold`` and the length sanity check of ``dedup.length_ratio``.

Plain functions of plain values (STYLE rule 2): no Spark, no I/O.
"""

from __future__ import annotations

from functools import cache

import numpy as np
import xxhash
from datasketch import MinHash

from crawl_udfs.simhash import shingles

__all__ = ["SEED", "INDEX_SHIFT", "blocks", "block_keys", "minhash", "minhash_of", "jaccard", "near_duplicates"]

SEED = 1
"""Seed of the MinHash permutations: signatures made with another seed cannot be compared."""

_MASK = (1 << 64) - 1
INDEX_SHIFT = 58  # a key is (block index << 58) | block bits: blocks are at most 58 bits wide (k >= 1)
_MAX_BLOCKS = 32   # index < 32 keeps the key below 2**63
_FEATURE_CHUNK = 4096  # features per (chunk x num_perm) uint32 matrix: 2 MiB at 128 permutations
# datasketch's MurmurHash3 32-bit finalizer (``minhash._FMIX_CONSTANTS[32]``)
_FMIX_S1, _FMIX_M1, _FMIX_S2, _FMIX_M2, _FMIX_S3 = (np.uint32(16), np.uint32(0x85EBCA6B), np.uint32(13),
                                                   np.uint32(0xC2B2AE35), np.uint32(16))


def blocks(k: int) -> tuple[tuple[int, int], ...]:
    """(shift, width) of the k + 1 blocks, from the low bits, widths differing by at most one: the one
    layout of the keys (``jobs/dedup_transforms.block_keys`` builds the same keys as a Spark Column)."""
    if not 1 <= k < _MAX_BLOCKS:
        raise ValueError(f"block keys need 1 <= k <= {_MAX_BLOCKS - 1}, got {k}")
    n = k + 1
    base, extra = divmod(64, n)
    out, shift = [], 0
    for i in range(n):
        width = base + (i < extra)
        out.append((shift, width))
        shift += width
    return tuple(out)


def block_keys(fingerprint: int, k: int) -> list[int]:
    """The k + 1 block keys of a 64-bit SimHash (signed or unsigned); ``1 <= k <= 31``."""
    fp = fingerprint & _MASK
    return [(i << INDEX_SHIFT) | ((fp >> shift) & ((1 << width) - 1))
            for i, (shift, width) in enumerate(blocks(k))]


@cache
def _permutations(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """datasketch's affine32 permutations (a, b) of :data:`SEED`: uint32 arrays of ``num_perm``."""
    a, b = MinHash(num_perm=num_perm, seed=SEED, scheme="affine32").permutations
    return a.astype(np.uint32), b.astype(np.uint32)


def minhash(text: str, shingle_words: int, num_perm: int) -> bytes | None:
    """The stored MinHash signature of ``text``'s shingle set (``num_perm`` x 4 bytes); None: no words."""
    return minhash_of(set(shingles(text, shingle_words)), num_perm)


def minhash_of(features: set[bytes], num_perm: int) -> bytes | None:
    """The stored MinHash signature of a set of features (``num_perm`` x 4 bytes); None: empty set."""
    if not features:
        return None
    a, b = _permutations(num_perm)
    hv = np.fromiter(map(xxhash.xxh32_intdigest, features), dtype=np.uint32, count=len(features))
    hv ^= hv >> _FMIX_S1
    hv *= _FMIX_M1
    hv ^= hv >> _FMIX_S2
    hv *= _FMIX_M2
    hv ^= hv >> _FMIX_S3
    low = np.full(num_perm, 0xFFFFFFFF, dtype=np.uint32)
    for start in range(0, len(hv), _FEATURE_CHUNK):
        phv = np.multiply.outer(hv[start:start + _FEATURE_CHUNK], a)  # uint32: wraps, as datasketch's
        phv += b
        np.minimum(low, phv.min(axis=0), out=low)
    return low.astype("<u4").tobytes()


def jaccard(a: bytes, b: bytes) -> float:
    """Estimated Jaccard similarity of the sets behind two stored signatures of one size."""
    if len(a) != len(b) or not a:
        raise ValueError(f"signatures of {len(a)} and {len(b)} bytes cannot be compared")
    return float(np.count_nonzero(np.frombuffer(a, "<u4") == np.frombuffer(b, "<u4"))) / (len(a) // 4)


def near_duplicates(a: bytes, b: bytes, words_a: int, words_b: int, jaccard_threshold: float,
                    length_ratio: float) -> bool:
    """The second check on a SimHash candidate pair: Jaccard estimate and main-text lengths (in words)."""
    if min(words_a, words_b) < length_ratio * max(words_a, words_b):
        return False
    return jaccard(a, b) >= jaccard_threshold
