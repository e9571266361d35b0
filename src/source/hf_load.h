/*
 * hf_load.h -- Hugging Face weights as a checkpoint model (meta.h): the
 * path of initial_load_in_hf resolved to an index or model.safetensors,
 * and the name map from the files' tensor names to registered names.
 * The load itself is the common one (load.c): docs/hf.md.
 */
#ifndef SHS_HF_LOAD_H
#define SHS_HF_LOAD_H

#include "source/meta.h"

/* Check name-map rules as hf_name_map spells them: "from=to" items
   separated by commas, optionally in [ ] and quoted, `from` possibly
   empty (every name), no `from` twice.  SHS_ECONFIG naming `field`. */
int shs__hf_rules_check(const char *rules, const char *field);

/*
 * The model of the Hugging Face weights at `path`: a folder holding
 * model.safetensors.index.json (files chosen through its weight_map) or
 * else model.safetensors, or one of those files named directly.  A step
 * directory or a save path of ours is refused (SHS_EINVAL naming it), as
 * is a folder with neither file (SHS_ENOCHECKPOINT).  *dir = the folder
 * the file names are relative to, *source = the file read (caller frees
 * both).  `field` prefixes messages ("initial_load_path").
 */
int shs__hf_open(shs__meta *m, char **dir, char **source, const char *path, const char *field);

/*
 * Rename the model's tensors to registered names: an entry of the JSON
 * map file (an object {"file name": "registered name"}) first, else the
 * rule with the longest matching prefix, else the name stays.  Chunk
 * keys (the names inside the files) do not change.  Two tensors that end
 * with one name are SHS_EMISMATCH naming both; a bad map file is
 * SHS_ECONFIG naming it.  `rules` and `map_file` may be NULL or "".
 */
int shs__hf_rename(shs__meta *m, const char *rules, const char *map_file);

/* The Hugging Face options of a manager's config, checked at create:
   initial_load_in_hf loads weights only (initial_load_model_only must
   be true) from a path it is given (initial_load_path or
   hf_assets_path), the name map applies only with it, and its rules
   parse.
   SHS_ECONFIG naming the field. */
int shs__hf_config_check(const shs_config *c);

#endif
