"""Erasure-coding policies and codecs, bit-compatible with Hadoop's `rs`, `rs-legacy` and `xor`.
Pure code, no I/O.

Every codec is linear and systematic over GF(2^8) with polynomial 0x11d: a group of k data units
and m parity units is the k data units times an (k+m) x k encode matrix E, whose top k rows are
the identity. Only the parity rows differ between codecs:

    rs          E[i][j] = inv(i XOR j)                         (Cauchy, as ISA-L / RSRawEncoder)
    rs-legacy   E[k+p][j] = coefficient of x^p in x^(m+j) mod g(x),  g(x) = prod (x + 2^i), i < m
    xor         E[k][j] = 1                                    (m = 1)

Decoding k survivors (`valid`, ascending) to the erased units: invert the k x k matrix of the
survivors' rows of E (Gauss-Jordan); an erased data unit's row is that inverse's row, an erased
parity unit's row is its E row times the inverse. Hadoop's decoders compute exactly this, so
any k survivors give Hadoop's bytes.

Buffers: a whole buffer times a constant is one `bytes.translate` through a 256-byte table, and
XOR accumulates whole buffers as Python integers (converted back once per output).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from hdfsfuse.errors import NotSupported
from hdfsfuse.proto import hdfs_pb2

# ----- GF(2^8), polynomial x^8 + x^4 + x^3 + x^2 + 1 (0x11d), generator 2 ----------------------

_EXP = [0] * 512
_LOG = [0] * 256
_x = 1
for _i in range(255):
    _EXP[_i] = _x
    _LOG[_x] = _i
    _x <<= 1
    if _x & 0x100:
        _x ^= 0x11D
for _i in range(255, 512):
    _EXP[_i] = _EXP[_i - 255]


def gf_mul(a: int, b: int) -> int:
    if a == 0 or b == 0:
        return 0
    return _EXP[_LOG[a] + _LOG[b]]


def gf_inv(a: int) -> int:
    if a == 0:
        raise ZeroDivisionError("0 has no inverse in GF(2^8)")
    return _EXP[255 - _LOG[a]]


# MUL[c] maps every byte v to c*v: a buffer times c is buf.translate(MUL[c]).
MUL: tuple[bytes, ...] = tuple(bytes(gf_mul(c, v) for v in range(256)) for c in range(256))

Matrix = list[list[int]]


def invert(matrix: Sequence[Sequence[int]]) -> Matrix:
    """The inverse of a square GF(2^8) matrix by Gauss-Jordan elimination (as GF256.gfInvertMatrix)."""
    n = len(matrix)
    a = [list(row) for row in matrix]
    b = [[int(i == j) for j in range(n)] for i in range(n)]
    for col in range(n):
        if a[col][col] == 0:
            swap = next((r for r in range(col + 1, n) if a[r][col]), None)
            if swap is None:
                raise ValueError("the matrix is not invertible")
            a[col], a[swap] = a[swap], a[col]
            b[col], b[swap] = b[swap], b[col]
        scale = gf_inv(a[col][col])
        a[col] = [gf_mul(scale, v) for v in a[col]]
        b[col] = [gf_mul(scale, v) for v in b[col]]
        for r in range(n):
            factor = a[r][col]
            if r != col and factor:
                a[r] = [x ^ gf_mul(factor, y) for x, y in zip(a[r], a[col], strict=True)]
                b[r] = [x ^ gf_mul(factor, y) for x, y in zip(b[r], b[col], strict=True)]
    return b


def _poly_mul(p: list[int], q: list[int]) -> list[int]:
    """Product of polynomials with GF(2^8) coefficients, lowest degree first."""
    out = [0] * (len(p) + len(q) - 1)
    for i, a in enumerate(p):
        for j, b in enumerate(q):
            out[i + j] ^= gf_mul(a, b)
    return out


def _legacy_parity_rows(k: int, m: int) -> Matrix:
    """RS-LEGACY's parity rows: column j of row p is the x^p coefficient of x^(m+j) mod g(x)."""
    g = [1]
    for i in range(m):
        g = _poly_mul(g, [_EXP[i], 1])  # (x + 2^i); monic, degree m
    rows = [[0] * k for _ in range(m)]
    for j in range(k):
        rem = [0] * (m + j) + [1]  # x^(m+j)
        for deg in range(len(rem) - 1, m - 1, -1):  # g is monic: subtract rem[deg] * x^(deg-m) * g
            c = rem[deg]
            if c:
                for t, gc in enumerate(g):
                    rem[deg - m + t] ^= gf_mul(c, gc)
        for p in range(m):
            rows[p][j] = rem[p]
    return rows


@functools.cache
def encode_matrix(codec: str, k: int, m: int) -> tuple[tuple[int, ...], ...]:
    """The (k+m) x k matrix E of a codec: identity rows, then one row per parity unit."""
    if codec == "rs":
        parity = [[gf_inv(i ^ j) for j in range(k)] for i in range(k, k + m)]
    elif codec == "rs-legacy":
        parity = _legacy_parity_rows(k, m)
    elif codec == "xor":
        if m != 1:
            raise NotSupported(f"the xor codec has one parity unit, not {m}")
        parity = [[1] * k]
    else:
        raise NotSupported(f"erasure-coding codec {codec!r} is not supported (rs, rs-legacy and xor are)")
    identity = [[int(i == j) for j in range(k)] for i in range(k)]
    return tuple(tuple(row) for row in identity + parity)


@functools.lru_cache(maxsize=256)
def decode_rows(codec: str, k: int, m: int, valid: tuple[int, ...], erased: tuple[int, ...]) -> Matrix:
    """For each erased unit, its coefficients over the k `valid` units' bytes (cached per pattern)."""
    if len(valid) != k or len(set(valid)) != k:
        raise ValueError(f"decoding needs {k} distinct valid units, got {valid}")
    e = encode_matrix(codec, k, m)
    inverse = invert([e[v] for v in valid])
    rows = []
    for unit in erased:
        if unit < k:
            rows.append(inverse[unit])
        else:
            rows.append([_dot(e[unit], [inverse[j][i] for j in range(k)]) for i in range(k)])
    return rows


def _dot(a: Sequence[int], b: Sequence[int]) -> int:
    acc = 0
    for x, y in zip(a, b, strict=True):
        acc ^= gf_mul(x, y)
    return acc


def combine(coefficients: Sequence[int], buffers: Sequence[bytes | bytearray], length: int) -> bytes:
    """XOR over i of coefficients[i] * buffers[i], each buffer exactly `length` bytes."""
    acc = 0
    for c, buf in zip(coefficients, buffers, strict=True):
        if c == 0:
            continue
        acc ^= int.from_bytes(buf if c == 1 else buf.translate(MUL[c]), "little")
    return acc.to_bytes(length, "little")


def encode(codec: str, data: Sequence[bytes], m: int) -> list[bytes]:
    """The m parity buffers of k equal-length data buffers (tests and fake peers)."""
    k = len(data)
    e = encode_matrix(codec, k, m)
    length = len(data[0])
    return [combine(e[k + p], data, length) for p in range(m)]


def decode(codec: str, k: int, m: int, inputs: Mapping[int, bytes | bytearray], erased: Sequence[int],
           length: int) -> dict[int, bytes]:
    """Recover the `erased` units from exactly k surviving units' equal-length buffers."""
    valid = tuple(sorted(inputs))
    rows = decode_rows(codec, k, m, valid, tuple(erased))
    buffers = [inputs[v] for v in valid]
    return {unit: combine(row, buffers, length) for unit, row in zip(erased, rows, strict=True)}


# ----- policies ------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class EcPolicy:
    name: str
    codec: str
    data_units: int
    parity_units: int
    cell_size: int
    id: int

    @property
    def units(self) -> int:
        return self.data_units + self.parity_units

    @property
    def stripe_size(self) -> int:
        return self.data_units * self.cell_size


MiB = 1024 * 1024
# Hadoop's SystemErasureCodingPolicies: the NameNode sends only the id of these.
SYSTEM_POLICIES = {
    p.id: p
    for p in (
        EcPolicy("RS-6-3-1024k", "rs", 6, 3, MiB, 1),
        EcPolicy("RS-3-2-1024k", "rs", 3, 2, MiB, 2),
        EcPolicy("RS-LEGACY-6-3-1024k", "rs-legacy", 6, 3, MiB, 3),
        EcPolicy("XOR-2-1-1024k", "xor", 2, 1, MiB, 4),
        EcPolicy("RS-10-4-1024k", "rs", 10, 4, MiB, 5),
    )
}
CODECS = ("rs", "rs-legacy", "xor")
MAX_UNITS = 16  # a block group's internal indices live in the low 4 bits of its block ids


def policy_name(proto: hdfs_pb2.ErasureCodingPolicyProto) -> str:
    """A policy's name, also for one this reader cannot decode."""
    system = SYSTEM_POLICIES.get(proto.id & 0xFF)
    return system.name if system is not None else proto.name or f"policy id {proto.id & 0xFF}"


def resolve_policy(proto: hdfs_pb2.ErasureCodingPolicyProto, what: str) -> EcPolicy:
    """The policy a NameNode answer names: a built-in id, or a user policy's full description."""
    policy_id = proto.id & 0xFF
    system = SYSTEM_POLICIES.get(policy_id)
    if system is not None:
        return system
    if not (proto.HasField("schema") and proto.HasField("cellSize") and proto.name):
        raise NotSupported(f"{what}: erasure-coding policy id {policy_id} is not built in and the NameNode "
                           "did not describe it")
    schema = proto.schema
    codec = schema.codecName.lower()
    k, m, cell = schema.dataUnits, schema.parityUnits, proto.cellSize
    if codec not in CODECS:
        raise NotSupported(f"{what}: erasure-coding policy {proto.name} uses codec {schema.codecName!r}; "
                           "rs, rs-legacy and xor are supported")
    if k < 1 or m < 1 or k + m > MAX_UNITS or cell <= 0 or (codec == "xor" and m != 1):
        raise NotSupported(f"{what}: erasure-coding policy {proto.name} has an invalid schema "
                           f"({k} data, {m} parity units, {cell}-byte cells)")
    return EcPolicy(proto.name, codec, k, m, cell, policy_id)
