"""hfgroup.py -- an independent model of how Hugging Face tools group the
tensors of a model into shard files and write the index, for the CLI
tests of `shardsafe merge`.

Written from the documented algorithms, not from their code:

- "current": huggingface_hub >= 0.21, split_state_dict_into_shards_factory
  (used by transformers >= 4.42 save_pretrained).  Tensors are visited in
  order.  A tensor larger than the maximum becomes a shard of its own at
  once, and the shard being filled stays open.  Otherwise, when the tensor
  would take the open shard past the maximum, the open shard is closed
  first.  Shards are numbered in the order they are complete.
- "legacy": transformers < 4.42, shard_checkpoint.  A new shard starts
  when the tensor would take the current one past the maximum and the
  current one is not empty; so a larger tensor closes the current shard
  and the next tensor starts another one.

The index is json.dumps(index, indent=2, sort_keys=True) + "\\n" with
metadata {"total_size": sum of the tensor bytes} and, for "current" (as
transformers >= 4.53 writes it), "total_parameters": the number of
elements of the model's parameters.

An entry is (name, nbytes); the order given is the visiting order.
"""
import json


def group_current(entries, max_size):
    """List of shards, each a list of names, in file order."""
    shards, open_shard, open_size = [], [], 0
    for name, nbytes in entries:
        if nbytes > max_size:
            shards.append([name])
            continue
        if open_size + nbytes > max_size:
            shards.append(open_shard)
            open_shard, open_size = [], 0
        open_shard.append(name)
        open_size += nbytes
    if open_shard:
        shards.append(open_shard)
    return shards


def group_legacy(entries, max_size):
    shards, size = [[]], 0
    for name, nbytes in entries:
        if size + nbytes > max_size and shards[-1]:
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def file_names(n):
    if n == 1:
        return ["model.safetensors"]
    return [f"model-{i:05d}-of-{n:05d}.safetensors" for i in range(1, n + 1)]


def plan(entries, max_size, grouping):
    """{file name: [tensor names]} for entries sorted by name (bytewise),
    as `shardsafe merge` visits them."""
    entries = sorted(entries, key=lambda e: e[0].encode())
    shards = (group_current if grouping == "current" else group_legacy)(entries, max_size)
    return dict(zip(file_names(len(shards)), shards))


def index_text(files, sizes, grouping, total_parameters):
    """The index as transformers writes it; `files` from plan(), `sizes`
    {name: nbytes}."""
    weight_map = {t: f for f, names in files.items() for t in names}
    meta = {"total_size": sum(sizes[t] for t in weight_map)}
    if grouping == "current":
        meta = {"total_parameters": total_parameters, **meta}
    return json.dumps({"metadata": meta, "weight_map": weight_map}, indent=2,
                      sort_keys=True) + "\n"
