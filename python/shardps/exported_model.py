"""An exported ShardPS model, read with numpy only (docs/saved_model.md).

`ps_checkpoint export` and `trainer --save_dir` write a folder holding
params.bin (every dense table) and sparse-<table>.bin (each sparse table's
rows by ascending key); this module reads it for a serving process, which
needs neither the native module nor PyTorch:

    from shardps import exported_model
    model = exported_model.load("/models/ctr")
    w = model.dense["fc1.weight"]                  # numpy, shape (160, 64)
    rows = model.sparse["embeddings"].lookup(ids)  # (len(ids), dim) float32

A key without a row gets the value a pserver gives it, its initial row
(the table's initializer, seeded by the key), unless `missing="zero"`.
Damaged files raise ValueError naming the file.
"""

import os
import struct
import zlib

import numpy as np

PARAMS_MAGIC = b"SHPSMDL1"
SPARSE_MAGIC = b"SHPSSPR1"

# RowInitializer.Type in proto/ps_service.proto.
ZERO, UNIFORM, CONSTANT = 0, 1, 2

_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _checked(path):
    """The file's bytes without its CRC-32 trailer, checked."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 12:
        raise ValueError("%s: too short to be an exported model file" % path)
    (crc,) = struct.unpack("<I", data[-4:])
    if zlib.crc32(data[:-4]) & 0xFFFFFFFF != crc:
        raise ValueError("%s: checksum mismatch (damaged)" % path)
    return data[:-4]


def read_params(path):
    """params.bin: {name: float32 array of its shape}, in file order."""
    data = _checked(path)
    if data[:8] != PARAMS_MAGIC:
        raise ValueError("%s: not a ShardPS params file" % path)
    pos = 8
    try:
        (n,) = struct.unpack_from("<I", data, pos)
        pos += 4
        tables = {}
        for _ in range(n):
            (name_len,) = struct.unpack_from("<I", data, pos)
            pos += 4
            name = data[pos:pos + name_len].decode()
            pos += name_len
            (ndims,) = struct.unpack_from("<I", data, pos)
            pos += 4
            shape = struct.unpack_from("<%dq" % ndims, data, pos)
            pos += 8 * ndims
            (count,) = struct.unpack_from("<Q", data, pos)
            pos += 8
            size = 1
            for d in shape:
                if d < 0:
                    raise ValueError("%s: table %s has a negative dimension"
                                     % (path, name))
                size *= d
            if pos + 4 * count > len(data) or count != size:
                raise ValueError("%s: table %s is truncated" % (path, name))
            tables[name] = np.frombuffer(
                data, dtype="<f4", count=count, offset=pos).reshape(shape)
            pos += 4 * count
    except struct.error:
        raise ValueError("%s: truncated" % path)
    if pos != len(data):
        raise ValueError("%s: trailing bytes" % path)
    return tables


def _mix64(k):
    """MurmurHash3's finaliser (common/placement/shard_map.h), on uint64."""
    with np.errstate(over="ignore"):
        k = k ^ (k >> np.uint64(33))
        k = k * np.uint64(0xFF51AFD7ED558CCD)
        k = k ^ (k >> np.uint64(33))
        k = k * np.uint64(0xC4CEB93E185A87EB)
        return k ^ (k >> np.uint64(33))


def initial_rows(init_type, scale, seed, dim, keys):
    """The initial rows of `keys` (common/model_export/initial_row.h):
    (len(keys), dim) float32, bit for bit what a pserver reads."""
    keys = np.asarray(keys, dtype=np.uint64)
    out = np.zeros((len(keys), dim), dtype=np.float32)
    if init_type == CONSTANT:
        out[:] = np.float32(scale)
    elif init_type == UNIFORM:
        with np.errstate(over="ignore"):
            state = _mix64(np.uint64(seed) ^ _mix64(keys))
            for j in range(dim):
                state = state + np.uint64(0x9E3779B97F4A7C15)
                z = state
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                z = z ^ (z >> np.uint64(31))
                u = (z >> np.uint64(40)).astype(np.float32) * np.float32(
                    1.0 / 16777216.0)
                out[:, j] = (np.float32(2.0) * u - np.float32(1.0)) * \
                    np.float32(scale)
    return out


class SparseTable(object):
    """One sparse table: `keys` (ascending uint64), `values` (len(keys),
    dim) float32, and the initializer of keys without a row."""

    def __init__(self, name, dim, init_type, scale, seed, keys, values):
        self.name = name
        self.dim = dim
        self.init_type, self.init_scale, self.init_seed = init_type, scale, seed
        self.keys = keys
        self.values = values

    def __len__(self):
        return len(self.keys)

    def lookup(self, keys, missing="init"):
        """Rows of `keys` (any shape of uint64 ids, flattened): (n, dim)
        float32. `missing`: "init" (the row a pserver would give) or
        "zero"."""
        keys = np.asarray(keys, dtype=np.uint64).ravel()
        at = np.searchsorted(self.keys, keys)
        at_clipped = np.minimum(at, max(len(self.keys) - 1, 0))
        found = (at < len(self.keys))
        if len(self.keys):
            found &= self.keys[at_clipped] == keys
        out = np.empty((len(keys), self.dim), dtype=np.float32)
        if found.any():
            out[found] = self.values[at_clipped[found]]
        lost = ~found
        if lost.any():
            if missing == "zero":
                out[lost] = 0
            elif missing == "init":
                out[lost] = initial_rows(self.init_type, self.init_scale,
                                         self.init_seed, self.dim, keys[lost])
            else:
                raise ValueError("missing must be 'init' or 'zero'")
        return out


def read_sparse(path):
    """A sparse-<table>.bin file as a SparseTable."""
    data = _checked(path)
    if data[:8] != SPARSE_MAGIC:
        raise ValueError("%s: not an exported sparse table" % path)
    try:
        pos = 8
        (name_len,) = struct.unpack_from("<I", data, pos)
        pos += 4
        name = data[pos:pos + name_len].decode()
        pos += name_len
        dim, dtype, init_type, scale, seed, rows = struct.unpack_from(
            "<IIIfQQ", data, pos)
        pos += struct.calcsize("<IIIfQQ")
    except struct.error:
        raise ValueError("%s: truncated header" % path)
    width = {0: 4, 1: 2}.get(dtype)
    if width is None or not 0 < dim <= (1 << 20) or \
            init_type not in (ZERO, UNIFORM, CONSTANT):
        raise ValueError("%s: bad header" % path)
    if len(data) - pos != rows * (8 + width * dim):
        raise ValueError("%s: %s" % (path, "truncated" if len(data) - pos <
                                     rows * (8 + width * dim)
                                     else "trailing bytes"))
    keys = np.frombuffer(data, dtype="<u8", count=rows, offset=pos)
    pos += 8 * rows
    if rows > 1 and not np.all(keys[1:] > keys[:-1]):
        raise ValueError("%s: keys not ascending" % path)
    values = np.frombuffer(data, dtype="<f4" if dtype == 0 else "<f2",
                           count=rows * dim, offset=pos).reshape(rows, dim)
    return SparseTable(name, dim, init_type, scale, seed, keys,
                       values.astype(np.float32))


class Model(object):
    """An exported model: `dense` {name: array}, `sparse` {name:
    SparseTable}, `config` (model.pbtxt's text, or None)."""

    def __init__(self, dense, sparse, config):
        self.dense, self.sparse, self.config = dense, sparse, config


def load(folder):
    """Reads an exported model folder."""
    dense = read_params(os.path.join(folder, "params.bin"))
    sparse = {}
    for name in sorted(os.listdir(folder)):
        if name.startswith("sparse-") and name.endswith(".bin"):
            t = read_sparse(os.path.join(folder, name))
            sparse[t.name] = t
    config = None
    path = os.path.join(folder, "model.pbtxt")
    if os.path.exists(path):
        with open(path) as f:
            config = f.read()
    return Model(dense, sparse, config)
