"""mkstrategy.py -- MindSpore parallel strategy files for the tests, and an
independent model of the slices they give each rank.

The file is a serialized ParallelStrategyMap (MindSpore's
node_strategy.proto, proto2), written here byte by byte from the protobuf
wire format (varints, length-delimited fields), not with a protobuf
library and not with the C code the library uses:

  ParallelStrategyMap   1 current_stage (uint32), 2 parallel_strategy_item,
                        3 parallel_layout_item (repeated)
  ParallelLayoutItem    1 param_name (string), 2 parallel_layouts
  ParallelLayouts       1 dev_matrix, 2 tensor_map, 3 param_split_shape,
                        4 indices_offset (repeated messages), 5 field,
                        6 opt_weight_shard_step, 7 opt_weight_shard_size
                        (int32)
  DevMatrix / TensorMap / ParamSplitShape / IndicesOffset
                        1 dim (repeated uint32 / int32 / int64 / int64)

A parameter is a dict: name, dev (device matrix), tmap (one value per
tensor dimension: -1, an axis value m -- mesh axis len(dev)-1-m -- or a
list of them for a dimension split over several axes), and optionally
opt_step, opt_size, field, split_shape.

slices() computes, from MindSpore's documented rules (the device matrix is
row-major, the last axis fastest; a dimension split over several axes
takes its slice index row-major over them in the order listed; the
optimizer shard cuts the first dimension again over the devices that
repeat the slice, using the repeated axes from the innermost outwards, the
model index outer and the optimizer index inner; merged pipeline files
name parameters "<stage>-<name>", stage s owning devices s*N..s*N+N-1),
the box each device holds.
"""


def varint(n):
    if n < 0:
        n += 1 << 64  # int32/int64 negatives: ten bytes, two's complement
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint(field << 3 | wire)


def f_varint(field, v):
    return key(field, 0) + varint(v)


def f_bytes(field, b):
    return key(field, 2) + varint(len(b)) + b


def dims_msg(values):
    """DevMatrix / TensorMap / ...: repeated field 1, unpacked (proto2)."""
    return b"".join(f_varint(1, v) for v in values)


def layouts_msg(p):
    dev, tmap = p["dev"], p["tmap"]
    out = f_bytes(1, dims_msg(dev))
    if any(isinstance(e, list) for e in tmap):
        # one TensorMap per dimension; a 1-D tensor's list padded with an
        # empty one, as MindSpore writes it
        for e in tmap:
            out += f_bytes(2, dims_msg(e if isinstance(e, list) else [e]))
        if len(tmap) == 1:
            out += f_bytes(2, b"")
    else:
        out += f_bytes(2, dims_msg(tmap))
    out += f_bytes(3, dims_msg(p.get("split_shape", [])))
    out += f_bytes(4, dims_msg(p.get("split_offset", [])))
    out += f_varint(5, p.get("field", 0))
    out += f_varint(6, p.get("opt_step", 0))
    out += f_varint(7, p.get("opt_size", 0))
    return out


def strategy_bytes(params, current_stage=1):
    out = f_varint(1, current_stage)
    for p in params:
        item = f_bytes(1, p["name"].encode()) + f_bytes(2, layouts_msg(p))
        out += f_bytes(3, item)
    return out


def write(path, params, **kw):
    with open(path, "wb") as f:
        f.write(strategy_bytes(params, **kw))


# ---------------------------------------------------------------------------
# the independent model of the boxes


def _axes(tmap, ndev):
    """Per tensor dimension, its mesh axes (0 the outermost)."""
    out = []
    for e in tmap:
        vals = e if isinstance(e, list) else [e]
        out.append([ndev - 1 - m for m in vals if m != -1])
    return out


def _opt_shard(dev, axes, step, size):
    """The device matrix and axes once the optimizer shard is applied."""
    dev, axes = list(dev), [list(a) for a in axes]
    if not step or not size:
        return dev, axes
    used = {a for aa in axes for a in aa}
    repeated = [a for a in range(len(dev)) if a not in used and dev[a] > 1]
    left = 1
    if size == -1:
        for a in repeated:
            left *= dev[a]
    else:
        left = size
    opt = []
    for a in reversed(repeated):
        if left == 1:
            break
        d = dev[a]
        if left < d:
            assert d % left == 0
            dev[a:a + 1] = [d // left, left]
            axes = [[x + (x > a) for x in aa] for aa in axes]
            opt = [x + (x > a) for x in opt]
            opt.insert(0, a + 1)
            left = 1
            break
        assert left % d == 0
        opt.insert(0, a)
        left //= d
    assert left == 1
    axes[0] = axes[0] + opt
    return dev, axes


def slices(p, shape, stage_devices=None, stages=(0,)):
    """{device: (offset, shape)} of parameter p of global `shape`; with
    pipeline stages, the devices of each stage that holds it."""
    dev, axes = _opt_shard(p["dev"], _axes(p["tmap"], len(p["dev"])),
                           p.get("opt_step", 0), p.get("opt_size", 0))
    n = 1
    for d in dev:
        n *= d
    stage_devices = stage_devices or n
    size = []
    for d, aa in enumerate(axes):
        split = 1
        for a in aa:
            split *= dev[a]
        assert shape[d] % split == 0, (p["name"], shape, d, split)
        size.append(shape[d] // split)
    strides = [1] * len(dev)
    for a in range(len(dev) - 2, -1, -1):
        strides[a] = strides[a + 1] * dev[a + 1]
    out = {}
    for s in stages:
        for k in range(n):
            coord = [(k // strides[a]) % dev[a] for a in range(len(dev))]
            off = []
            for d, aa in enumerate(axes):
                idx = 0
                for a in aa:
                    idx = idx * dev[a] + coord[a]
                off.append(idx * size[d])
            out[s * stage_devices + k] = (off, size)
    return out


def cut(a, off, size):
    """The box [off, off + size) of numpy array a."""
    return a[tuple(slice(o, o + s) for o, s in zip(off, size))]
