"""The offline tools as Python calls: merge (shs_merge, `shardsafe merge`),
reshard (shs_reshard, `shardsafe reshard`), and MindSpore's own names
for them -- unified_safetensors and load_distributed_checkpoint (seed 004).

Callables (choice_func) run here in Python: the checkpoint's tensors are
listed first (open_checkpoint) and the function's answers are passed to
the library as exact include/exclude globs and rename rules, checked to
give exactly the function's names.  docs/python.md ("Tools") lists the
MindSpore arguments and what each does here.
"""

import json
import os
import tempfile

from . import _C
from ._errors import InvalidArgumentError, MismatchError

__all__ = ["merge", "reshard", "saved_layout", "unified_safetensors",
           "load_distributed_checkpoint"]

_GROUPINGS = {"current": _C.MERGE_GROUPING_CURRENT, "legacy": _C.MERGE_GROUPING_LEGACY}


def _key(key, key_file, key_env):
    given = [k for k in (key, key_file, key_env) if k is not None]
    if len(given) > 1:
        raise InvalidArgumentError("give one of key, key_file, key_env")
    if key_file is not None or key_env is not None:
        return _C.key_load(None if key_file is None else os.fspath(key_file), key_env)
    return key


def _globs(x, what):
    if x is None:
        return []
    if isinstance(x, str):
        return [x]
    out = list(x)
    if not all(isinstance(g, str) for g in out):
        raise InvalidArgumentError(f"{what} must be a glob or a list of globs (str)")
    return out


def _rules(rename):
    """rename: "FROM=TO" strings, (FROM, TO) pairs, or a dict FROM -> TO."""
    if rename is None:
        return []
    items = rename.items() if isinstance(rename, dict) else rename
    out = []
    for r in items:
        if isinstance(r, str):
            out.append(r)
            continue
        a, b = r
        if not isinstance(a, str) or not isinstance(b, str) or not a or "=" in a:
            raise InvalidArgumentError(f"rename rule {r!r}: FROM must be a non-empty str "
                                       "without '='")
        out.append(f"{a}={b}")
    return out


def _size(max_shard_size):
    if max_shard_size is None:
        return 0
    if isinstance(max_shard_size, str):
        return _C.parse_size(max_shard_size)
    n = int(max_shard_size)
    if n <= 0:
        raise InvalidArgumentError(f"max_shard_size {max_shard_size!r}: must be > 0")
    return n


def _glob_escape(name):
    """A glob (fnmatch(3), no flags) that matches exactly `name`."""
    return "".join("\\" + ch if ch in "*?[\\" else ch for ch in name)


def _apply(rules, name):
    for a, b in rules:
        name = name.replace(a, b)  # every occurrence, left to right (merge's rule)
    return name


def _core_rule(old, new):
    """The smallest (FROM, TO) that turns `old` into `new`: their common
    prefix and suffix cut off (anchored on one character for an insertion)."""
    p = 0
    while p < min(len(old), len(new)) and old[p] == new[p]:
        p += 1
    s = 0
    while s < min(len(old), len(new)) - p and old[-1 - s] == new[-1 - s]:
        s += 1
    a, b = old[p:len(old) - s], new[p:len(new) - s]
    if not a:
        if p:
            a, b = old[p - 1] + a, new[p - 1] + b
        else:
            a, b = old[len(old) - s], b + old[len(old) - s]
    return a, b


def _token_rules(mapping, names):
    """Exact rules for any mapping: each affected name (renamed, or
    containing a renamed one), longest first, becomes a token made of
    characters no name has; then each token becomes its final name."""
    affected = {n for n in names if any(r in n for r in mapping)}
    used = set("".join(names)) | set("".join(mapping.values()))
    free = (chr(c) for c in range(0xE000, 0xF900) if chr(c) not in used)
    start, digits = next(free), [next(free) for _ in range(32)]
    width = 1
    while len(digits) ** width < len(affected):
        width += 1

    def token(i):
        out = []
        for _ in range(width):
            i, d = divmod(i, len(digits))
            out.append(digits[d])
        return start + "".join(out)

    order = sorted(affected, key=lambda n: (-len(n), n))
    tokens = {n: token(i) for i, n in enumerate(order)}
    return [(n, tokens[n]) for n in order] + [(tokens[n], mapping.get(n, n)) for n in order]


def rename_rules(mapping, names):
    """Rules for merge's rename (substring replacement, in order) that give
    exactly mapping[n] for each renamed name and leave the other `names`
    unchanged; InvalidArgumentError when no such list exists (a renamed
    name, or one containing it, has '=')."""
    if not mapping:
        return []

    def exact(rules):
        return all("=" not in a for a, _ in rules) and all(
            _apply(rules, n) == mapping.get(n, n) for n in names)

    compact = list(dict.fromkeys(_core_rule(o, n) for o, n in mapping.items()))
    if exact(compact):
        return [f"{a}={b}" for a, b in compact]
    try:
        tokens = _token_rules(mapping, names)
    except StopIteration:  # every private-use character is in a name
        tokens = None
    if tokens is not None and exact(tokens):
        return [f"{a}={b}" for a, b in tokens]
    bad = next(iter(mapping))
    raise InvalidArgumentError(
        f"the renames (e.g. '{bad}' -> '{mapping[bad]}') cannot be made exactly by merge's "
        "substring rules (a name to change contains '='): rename with explicit rename= rules")


def _choose(src, step, with_optimizer, choice_func, key):
    """Apply choice_func to the checkpoint's tensors: (include, exclude,
    rename) for the library."""
    from . import open_checkpoint
    with open_checkpoint(src, step=step, key=key) as c:
        names = [n for n in c.keys()
                 if with_optimizer or c.tensor_info(n)["kind"] == "model"]
    chosen, mapping = [], {}
    for n in names:
        r = choice_func(n)
        if isinstance(r, bool):
            if r:
                chosen.append(n)
        elif isinstance(r, str):
            if not r:
                raise InvalidArgumentError(f"choice_func('{n}') returned an empty name")
            chosen.append(n)
            if r != n:
                mapping[n] = r
        else:
            raise InvalidArgumentError(f"choice_func('{n}') returned {type(r).__name__}: it "
                                       "must return a bool (keep or drop) or a str (the new name)")
    if not chosen:
        raise InvalidArgumentError(f"{src}: choice_func kept none of the {len(names)} tensors")
    include, exclude = [], []
    if len(chosen) < len(names):
        dropped = sorted(set(names) - set(chosen))
        if len(dropped) < len(chosen):
            exclude = [_glob_escape(n) for n in dropped]
        else:
            include = [_glob_escape(n) for n in chosen]
    return include, exclude, rename_rules(mapping, chosen)


def merge(src, dst, *, max_shard_size=None, dtype=None, include=None, exclude=None,
          rename=None, choice_func=None, with_optimizer=False, jobs=1, step=None, part=None,
          finish_parts=None, force=False, fsync=False, key=None, key_file=None, key_env=None,
          progress=None, grouping="current", src_strategy_file=None):
    """Merge checkpoint `src` into the Hugging Face layout in directory
    `dst` (shs_merge, `shardsafe merge`; docs/merge.md): complete tensors
    in model.safetensors or model-0000I-of-0000N.safetensors plus
    model.safetensors.index.json, atomically.

    max_shard_size  bytes per file, an int or "5GB"/"500MiB" (default 5GB)
    dtype           convert floating-point tensors ("bf16", "F16", ...)
    include/exclude globs on the source names; rename "FROM=TO" rules
                    (or pairs, or a dict), applied in order to every name
    choice_func     callable(name) -> bool (keep?) or str (new name); it
                    replaces include/exclude/rename
    with_optimizer  optimizer tensors too; jobs: threads
    step            a save path's step (default: the tracker's, else newest)
    part=(I, N)     write part I of N into dst.part-I-of-N;
    finish_parts=N  gather N finished parts into dst and write the index
    force           replace a dst that holds only an earlier merge's files
    fsync           make the output durable
    key / key_file / key_env   the key of an encrypted source
    progress        callable(done, total) from the merging threads; a true
                    result cancels (nothing is left behind)
    grouping        "current" (huggingface_hub >= 0.21 / transformers >= 4.42,
                    "total_parameters" in the index) or "legacy"
    src_strategy_file  a MindSpore strategy file: `src` is a folder of
                    rank_0, rank_1, ... folders laid out as it says
    Returns {"n_tensors", "n_files", "total_size", "files_written",
    "bytes_written"}."""
    key = _key(key, key_file, key_env)
    strategy = None if src_strategy_file is None else os.fspath(src_strategy_file)
    if strategy is not None and choice_func is not None:
        raise InvalidArgumentError("choice_func with src_strategy_file: select with "
                                   "include/exclude/rename instead")
    inc, exc, ren = _globs(include, "include"), _globs(exclude, "exclude"), _rules(rename)
    if choice_func is not None:
        if inc or exc or ren:
            raise InvalidArgumentError("choice_func replaces include, exclude and rename: "
                                       "select and rename inside the function")
        if not callable(choice_func):
            raise InvalidArgumentError("choice_func must be callable")
        inc, exc, ren = _choose(src, step, with_optimizer, choice_func, key)
    if part is not None and finish_parts is not None:
        raise InvalidArgumentError("part and finish_parts exclude each other")
    part_index, part_count = 0, 0
    if part is not None:
        part_index, part_count = (int(v) for v in part)
        if not 0 <= part_index < part_count:
            raise InvalidArgumentError(f"part {part!r}: needs (I, N) with 0 <= I < N")
    if finish_parts is not None:
        part_count = int(finish_parts)
        if part_count < 1:
            raise InvalidArgumentError(f"finish_parts {finish_parts!r}: needs N >= 1")
    if progress is not None and not callable(progress):
        raise InvalidArgumentError("progress must be callable")
    if grouping not in _GROUPINGS:
        raise InvalidArgumentError(f"grouping {grouping!r}: 'current' or 'legacy'")
    flags = ((_C.MERGE_FORCE if force else 0) | (_C.MERGE_FSYNC if fsync else 0)
             | (_C.MERGE_WITH_OPTIMIZER if with_optimizer else 0))
    return _C.merge(os.fspath(src), os.fspath(dst), _size(max_shard_size), dtype, inc, exc, ren,
                    flags, int(jobs), part_index, part_count, -1 if step is None else int(step),
                    key, progress, finish_parts is not None, _GROUPINGS[grouping], strategy)


def saved_layout(src, step=None):
    """The layout `src` was saved with (a layout document, as a dict):
    the recorded one, else derived from its chunks."""
    return json.loads(_C.saved_layout(os.fspath(src), -1 if step is None else int(step)))


def reshard(src, dst, layout=None, *, world_size=None, step=None, prefix=None, fsync=True,
            key=None, key_file=None, key_env=None, strategy_file=None, rank_list=None):
    """Rewrite checkpoint `src` as the step directory `dst` for another
    layout, offline (shs_reshard, `shardsafe reshard`; docs/reshard.md).
    `layout`: a layout document (a dict, or the path of its JSON file);
    None: the source's own layout.  strategy_file: the target layout from
    a MindSpore strategy file instead (rank_list: the rank of each of its
    devices).  world_size scales it (TP 4 -> 2).
    Returns the result dict (world_size, saved_world_size, step,
    n_tensors, bytes_read, bytes_written, blobs_carried, blobs_dropped,
    scaled, layout_recorded)."""
    key = _key(key, key_file, key_env)
    ws = 0 if world_size is None else int(world_size)
    if world_size is not None and ws <= 0:
        raise InvalidArgumentError(f"world_size {world_size!r}: must be > 0")
    st = -1 if step is None else int(step)
    extra = {}
    if strategy_file is not None:
        if layout is not None:
            raise InvalidArgumentError("give layout or strategy_file, not both")
        extra["strategy"] = os.fspath(strategy_file)
    if rank_list is not None:
        extra["rank_list"] = [int(r) for r in rank_list]
    if isinstance(layout, dict):
        with tempfile.TemporaryDirectory(prefix="shardsafe-layout-") as d:
            path = os.path.join(d, "layout.json")
            with open(path, "w") as fh:
                json.dump(layout, fh)
            return _C.reshard(os.fspath(src), os.fspath(dst), path, ws, st, prefix, bool(fsync),
                              key, **extra)
    lp = None if layout is None else os.fspath(layout)
    return _C.reshard(os.fspath(src), os.fspath(dst), lp, ws, st, prefix, bool(fsync), key,
                      **extra)


def unified_safetensors(src_dir, src_strategy_file, dst_dir, merge_with_redundancy=True,
                        file_suffix=None, max_process_num=64, choice_func=None,
                        split_dst_file=()):
    """MindSpore's mindspore.parallel.unified_safetensors over shs_merge:
    every tensor of the checkpoint in `src_dir` (a MindSpore CP2.0 or
    single-card save, or any checkpoint shardsafe reads), complete, into
    `dst_dir` in the Hugging Face layout (model*.safetensors + index);
    an earlier merge's output there is replaced.

    src_strategy_file    None: the layout is the checkpoint's own metadata;
                         a MindSpore strategy file: src_dir holds rank_0,
                         rank_1, ... folders laid out as it says
    merge_with_redundancy  not needed: the checkpoint's metadata says
                         which chunks were saved once; either value works
    file_suffix          must be None (select a step with merge(step=N))
    max_process_num      threads, at most the machine's CPUs
    choice_func          callable(name) -> bool or new name (str)
    split_dst_file       (i, n), i from 1: write part i of n into
                         dst_dir.part-(i-1)-of-n; once all are done,
                         merge(src_dir, dst_dir, finish_parts=n) gathers
                         them (MindSpore writes parts straight into dst_dir)
    Returns the merge result dict."""
    if file_suffix is not None:
        raise NotImplementedError(
            f"file_suffix={file_suffix!r}: shardsafe merges one step of a checkpoint, chosen "
            "by its metadata, not by file names: call merge(src_dir, dst_dir, step=N)")
    if not isinstance(merge_with_redundancy, bool):
        raise InvalidArgumentError("merge_with_redundancy must be a bool")
    jobs = max(1, min(int(max_process_num), os.cpu_count() or 1, 1024))
    part = None
    if split_dst_file:
        i, n = (int(v) for v in split_dst_file)
        if not 1 <= i <= n:
            raise InvalidArgumentError(f"split_dst_file {tuple(split_dst_file)!r}: needs (i, n) "
                                       "with 1 <= i <= n")
        part = (i - 1, n)
    if src_strategy_file is not None and choice_func is not None:
        # the strategy's rank folders are read only by the library: list
        # their tensors there first (a plain merge of one file each would
        # not know their layout), so choice_func is applied after a merge
        raise NotImplementedError("choice_func with src_strategy_file: merge without "
                                  "choice_func, then select from the merged files")
    return merge(src_dir, dst_dir, choice_func=choice_func, jobs=jobs, part=part, force=True,
                 with_optimizer=True, src_strategy_file=src_strategy_file)


def _target_names(names, choice_func, name_map):
    """checkpoint name -> target name, for the chosen ones."""
    out = {}
    for n in names:
        t = n
        if choice_func is not None:
            r = choice_func(n)
            if isinstance(r, bool):
                if not r:
                    continue
            elif isinstance(r, str) and r:
                t = r
            else:
                raise InvalidArgumentError(f"choice_func('{n}') returned {r!r}: it must return "
                                           "a bool (keep or drop) or a non-empty str (new name)")
        if name_map is not None:
            t = name_map.get(t, t)
        out[n] = t
    targets = {}
    for n, t in out.items():
        if t in targets:
            raise MismatchError(f"tensors '{targets[t]}' and '{n}' are both loaded as '{t}'")
        targets[t] = n
    return out


def load_distributed_checkpoint(network=None, checkpoint_filenames=None, predict_strategy=None,
                                train_strategy_filename=None, strict_load=False, dec_key=None,
                                dec_mode="AES-GCM", format="safetensors",
                                unified_safetensors_dir=None, dst_safetensors_dir=None,
                                rank_id=None, output_format="safetensors", name_map=None,
                                max_process_num=64, return_param_dict=False, choice_func=None,
                                framework=None, step=None):
    """MindSpore's load_distributed_checkpoint, for one process: complete
    tensors from a checkpoint saved by any number of ranks (read through
    shs_checkpoint_read: checksummed, converted to the target's float
    dtype), loaded into `network` in place.

    network    a torch.nn.Module (its state_dict), a dict name -> numpy
               array / torch tensor (filled in place), or None (then the
               tensors are returned)
    unified_safetensors_dir or checkpoint_filenames   the source: a save
               path, a step directory, a merge output, a folder or file of
               safetensors, or a list of safetensors files
    choice_func callable(name) -> bool (load it?) or str (its new name);
               name_map: a dict checkpoint name -> network name, after it
    strict_load every network tensor loaded and every chosen checkpoint
               tensor used, else MismatchError naming them
    dec_key    the 32-byte key of an encrypted checkpoint (AES-GCM)
    Returns (missing, unexpected) names, or with return_param_dict (or no
    network) the dict of loaded tensors.  predict_strategy,
    train_strategy_filename, rank_id, dst_safetensors_dir and format="ckpt"
    raise NotImplementedError naming what is missing."""
    if format != "safetensors":
        raise NotImplementedError(
            f"format={format!r}: shardsafe reads safetensors only; convert MindSpore .ckpt "
            "files with mindspore.ckpt_to_safetensors first")
    if train_strategy_filename is not None:
        raise NotImplementedError(
            "train_strategy_filename: read rank folders laid out by a strategy file with "
            "unified_safetensors(src_dir, train_strategy_filename, dst_dir) first, then pass "
            "unified_safetensors_dir=dst_dir")
    if predict_strategy is not None or rank_id is not None or dst_safetensors_dir is not None:
        raise NotImplementedError(
            "predict_strategy / rank_id / dst_safetensors_dir: loading one rank's slices for a "
            "target strategy needs a per-rank read plan that libshardsafe does not expose; "
            "use shardsafe.reshard(src, dst, layout) offline, or CheckpointManager with "
            "Shard (it reshards when loading)")
    if output_format != "safetensors":
        raise InvalidArgumentError(f"output_format {output_format!r}: only 'safetensors'")
    if dec_key is not None and dec_mode != "AES-GCM":
        raise InvalidArgumentError(f"dec_mode {dec_mode!r}: shardsafe encrypts with AES-GCM only")
    if int(max_process_num) < 1:
        raise InvalidArgumentError("max_process_num must be >= 1")
    if (unified_safetensors_dir is None) == (checkpoint_filenames is None):
        raise InvalidArgumentError("give one of unified_safetensors_dir and checkpoint_filenames")
    if choice_func is not None and not callable(choice_func):
        raise InvalidArgumentError("choice_func must be callable")
    if name_map is not None and not isinstance(name_map, dict):
        raise InvalidArgumentError("name_map must be a dict checkpoint name -> network name")
    sources = unified_safetensors_dir if checkpoint_filenames is None else checkpoint_filenames
    if isinstance(sources, (str, bytes, os.PathLike)):
        sources = [sources]
    sources = list(sources)

    target, fw_name = _target_of(network, framework)
    from . import open_checkpoint
    ckpts = [open_checkpoint(s, framework=fw_name, step=step, key=dec_key) for s in sources]
    try:
        where = {}
        for c in ckpts:
            for n in c.keys():
                if n in where:
                    raise MismatchError(f"tensor '{n}' is in both {where[n].path} and {c.path}: "
                                        "pass files that hold different tensors (or the "
                                        "checkpoint's directory)")
                where[n] = c
        names = _target_names(list(where), choice_func, name_map)
        loaded, unexpected = {}, []
        for n, t in names.items():
            if target is not None and t not in target:
                unexpected.append(n)
                continue
            dst = None if target is None else target[t]
            loaded[t] = _read_into(where[n], n, dst)
        missing = [] if target is None else sorted(set(target) - set(loaded) - _tied(
            network, target, loaded))
        unexpected.sort()
        if strict_load and (missing or unexpected):
            raise MismatchError(
                "strict_load: " + "; ".join(
                    s for s in (f"network tensors not in the checkpoint: {missing}" if missing
                                else "", f"checkpoint tensors the network lacks: {unexpected}"
                                if unexpected else "") if s))
    finally:
        for c in ckpts:
            c.close()
    if return_param_dict or network is None:
        return loaded
    return missing, unexpected


def _tied(network, target, loaded):
    """Names of a torch module's tensors that share memory with a loaded
    one (tied weights): filled by that load."""
    if not isinstance(network, _module_type()):
        return set()
    from .torch import _find_shared_tensors
    return {n for group in _find_shared_tensors(target) if group & set(loaded) for n in group}


def _module_type():
    try:
        import torch
        return torch.nn.Module
    except ImportError:  # pragma: no cover -- Debian's python3-torch is installed
        return ()


def _target_of(network, framework):
    """({name: tensor to fill} or None, framework name)."""
    if network is None:
        return None, framework or "np"
    if isinstance(network, _module_type()):
        return dict(network.state_dict()), "pt"
    if isinstance(network, dict):
        fw = framework
        if fw is None:
            fw = "pt" if any(type(v).__module__.startswith("torch") for v in network.values()) \
                else "np"
        return network, fw
    raise InvalidArgumentError(f"network must be a torch.nn.Module, a dict of tensors or None, "
                               f"not {type(network).__name__}")


def _read_into(ckpt, name, dst):
    """Read tensor `name` (whole), converted to dst's dtype, into dst in
    place when its memory allows it; returns dst (or the new tensor)."""
    if dst is None:
        return ckpt.get_tensor(name)
    info = ckpt.tensor_info(name)
    shape = tuple(dst.shape)
    if tuple(info["shape"]) != shape:
        raise MismatchError(f"tensor '{name}': shape {list(info['shape'])} in the checkpoint, "
                            f"{list(shape)} in the network")
    fw = ckpt._fw
    dname = fw.dtype_name(dst.dtype, f"tensor '{name}'")
    try:
        _, _, buf = fw.inplace_bytes(name, dst)
    except InvalidArgumentError:
        buf = None  # not this process's contiguous CPU memory: read, then copy
    if buf is not None:
        if buf.nbytes:
            ckpt._c.read(name, None, None, dname, buf)
        return dst
    t = ckpt.get_tensor(name, dtype=dname)
    if fw.name == "pt":
        with fw.torch.no_grad():
            dst.copy_(t)
    else:
        dst[...] = t
    return dst
