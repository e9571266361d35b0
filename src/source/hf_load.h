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

/*
 * initial_load_in_hf_quantized (torchtitan's name; docs/hf.md): FP8
 * weights stored as F8_E4M3 with a block scale, DeepSeek-V3's layout.
 * For a 2-D weight W [rows, cols] the files hold "<W's name>_scale_inv",
 * shape [ceil(rows/128), ceil(cols/128)], F32 (BF16 and F16 accepted),
 * and the real weight is W[i][j] * scale[i/128][j/128].  The pairing is
 * by the files' names (before renaming); the load (load.c) multiplies
 * each registered box in place.
 */
#define SHS__HF_QUANT_BLOCK 128
#define SHS__HF_SCALE_SUFFIX "_scale_inv"
typedef struct shs__dequant {
    long *scale_of;          /* per tensor of the model: its scale's
                                index in the model, or -1 */
    unsigned char *is_scale; /* per tensor: it is some weight's scale
                                (consumed: never "unused") */
    uint64_t block;          /* SHS__HF_QUANT_BLOCK */
} shs__dequant;

/* Pair the weights of `m` (renamed or not: the files' names are used)
   with their scales.  A scale next to a weight that is not F8_E4M3 or
   not 2-D, or a scale of another shape or dtype: SHS_ECORRUPT naming
   both (`src`: the index or file, for messages).  An F8_E4M3 weight
   without a scale is left unpaired; the load refuses it when it is
   registered. */
int shs__hf_dequant_pair(shs__dequant *q, const shs__meta *m, const char *src);
void shs__hf_dequant_release(shs__dequant *q);

/* The Hugging Face options of a manager's config, checked at create:
   initial_load_in_hf loads weights only (initial_load_model_only must
   be true) from a path it is given (initial_load_path or
   hf_assets_path), the name map applies only with it, and its rules
   parse.
   SHS_ECONFIG naming the field. */
int shs__hf_config_check(const shs_config *c);

#endif
