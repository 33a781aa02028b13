/*
 * ggmlite/io.h: file formats over the engine (library ggmlite::io): NumPy
 * .npy and safetensors tensors, and graph files (a text form of graphs).
 * The only part of ggmlite that needs cJSON.
 *
 * Misuse (MISUSE in docs/contracts.md, as <ggmlite/ggmlite.h> states it):
 * every function here given NULL for a pointer argument returns its error
 * value (NULL, -1, 0, GML_ERR_INVALID) with the message "<function>: <arg>
 * is NULL" written into err (when err is given) and kept for the calling
 * thread (gml_last_error(NULL)), or does nothing (the closers and freers,
 * gml_write_op_table); it never crashes. Arguments that may be NULL say so
 * where they are declared: err (no message written), a loader's name,
 * converted_from, gml_safetensors_unlisted's file, gml_safetensors_tensor's
 * name, what of gml_parse_npy, gml_parse_npy_converted,
 * gml_parse_safetensors ("<memory>" in messages) and gml_parse_graph
 * ("<graph>"), a graph parser's binder, outputs when max_outputs or
 * n_outputs is 0, tensors when n is 0. A context freed before the call is
 * refused by the engine's calls these functions make (gml_new_tensor
 * first), with the engine's message; a freed graph or gml_safetensors
 * cannot be told from a live one.
 */
#ifndef GGMLITE_IO_H
#define GGMLITE_IO_H

#include <ggmlite/ggmlite.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- files: NumPy .npy and safetensors ----------------------------------
 * Little-endian f32 ('<f4', F32) and i32 ('<i4', I32) tensors of 1 to 4 dims,
 * C order; safetensors' F16 and BF16 and .npy's '<f2' load as GML_F16 and
 * GML_BF16 (bits as stored, nothing converted). Savers write f32 and i32. A 0-D scalar in a file loads as a 1-D tensor [1]. Loaders make a
 * new context (free it with gml_free) holding exactly the tensors, data
 * 64-byte aligned; on failure they return NULL and write one line into err
 * naming the file, the byte offset where it applies and what was expected:
 *   w.safetensors: tensor 'w_q.weight': data_offsets [0, 4096] end past the
 *   data buffer (1024 bytes, at file offset 72)
 * They check everything and never read outside the input, whatever it holds.
 * They read regular files only, opened without blocking: a FIFO (which
 * would block until a writer came), a device, a socket or a directory is
 * refused at once: "x.npy: is a FIFO, not a regular file".
 * Savers write any strides (a permuted or sliced view saves what it shows,
 * in logical C order) to a temporary file in the same directory renamed into
 * place, so a failed save leaves no partial file and the old one intact;
 * their messages name the path and the system's reason.
 */

/* Every entry of a safetensors file, each a tensor named by its key (in file
 * order; find them with gml_get_tensor). __metadata__ (null, or strings to
 * strings) is checked, then ignored. Refused, as the reference loader
 * (huggingface/safetensors) refuses them: a header that is not UTF-8 JSON
 * starting with '{' or is over 100,000,000 bytes; shape sizes and
 * data_offsets not written as plain integers ("2.0", "1e1", "-0"); data
 * that does not tile the data buffer exactly (a gap before the first
 * tensor or between two, an overlap, bytes after the last); dtype, shape or
 * data_offsets twice in an entry. Refused by ggmlite besides: names holding
 * a control character (a byte below 0x20, or 0x7f, raw or \u-escaped; the
 * message names the byte and its file offset), names of GML_MAX_NAME bytes
 * or more (gml_safetensors_open below takes any length), repeated names,
 * \u0000 in a dtype or a field name. A file that is not safetensors (a
 * torch.save zip or pickle, a .npy, JSON) is named as such. The tensors are
 * read (copied) into the context; gml_safetensors_open maps instead. */
GML_API gml_context *gml_load_safetensors(const char *path, char *err, size_t err_size);
/* ---- safetensors by mapping, any name length, sharded checkpoints ---------
 * gml_safetensors_open maps a file read-only (mmap PROT_READ, MAP_PRIVATE)
 * and checks its header as gml_load_safetensors does, except that names
 * may be of any length; no tensor data is read until used. A path ending in
 * ".json" is a sharded checkpoint's index (huggingface save_pretrained:
 * {"metadata": {...}, "weight_map": {"name": "model-00001-of-00002.safetensors"}}):
 * each shard it names (a file beside the index) is mapped, and the index and
 * its shards must agree: a name the index puts in a shard that lacks it is
 * an error naming both, and so is a tensor a shard holds that the index
 * leaves out (an unexpected tensor, as load_state_dict(strict=True) says;
 * gml_safetensors_open_flags with GML_ST_UNLISTED sets such tensors aside
 * instead: not counted, found or loaded, listed by gml_safetensors_unlisted).
 * Names and shard paths holding \u0000 (which would cut them short) or a
 * control character are refused, naming the index and the key. A file that
 * is not safetensors (a torch.save zip or pickle, a .npy) is named as such
 * in the message, with what to do. Every file is opened without blocking:
 * a FIFO, device, socket or directory is refused at once ("<path>: is a
 * FIFO, not a regular file"), as by every loader here.
 * gml_safetensors_tensor makes a header for tensor i (0 <= i < count) in
 * ctx named `name` (NULL: its own name, which must then be shorter than
 * GML_MAX_NAME): in a no_alloc ctx its data points into the mapping
 * (read-only: never write it), or, when the file puts it at an offset that
 * is not a multiple of 4, into an aligned copy made on first use; in an
 * allocating ctx the data is copied. Lifetime: the data of those headers is
 * st's, valid until gml_safetensors_close(st); close after gml_free of the
 * contexts that use them (and after computing the graphs reading them). */
typedef struct gml_safetensors gml_safetensors;
GML_API gml_safetensors *gml_safetensors_open(const char *path, char *err, size_t err_size);
/* gml_safetensors_open with flags: 0 or GML_ST_UNLISTED (others are refused). */
enum { GML_ST_UNLISTED = 1 };
GML_API gml_safetensors *gml_safetensors_open_flags(const char *path, unsigned flags, char *err,
                                                    size_t err_size);
/* The i-th tensor set aside by GML_ST_UNLISTED (its file into *file if not
 * NULL), or NULL past the last. */
GML_API const char *gml_safetensors_unlisted(const gml_safetensors *st, int i, const char **file);
GML_API int gml_safetensors_count(const gml_safetensors *st);
GML_API const char *gml_safetensors_name(const gml_safetensors *st, int i); /* the full name */
GML_API const char *gml_safetensors_file(const gml_safetensors *st, int i); /* the file holding it */
GML_API int gml_safetensors_find(const gml_safetensors *st, const char *name); /* index, or -1 */
GML_API gml_tensor *gml_safetensors_tensor(gml_safetensors *st, int i, gml_context *ctx, const char *name,
                                   char *err, size_t err_size);
GML_API void gml_safetensors_close(gml_safetensors *st);
/* A sharded checkpoint's index from bytes (the parser gml_safetensors_open
 * uses): its weight_map's (name, shard file) pairs in file order; free them
 * with gml_free_safetensors_index. Refused: not one JSON object, no
 * weight_map object, a value that is not a string, a shard path that is
 * absolute or holds "..", a control byte in a name or path (raw or escaped;
 * \u0000 anywhere, which cJSON would cut the string at), a name twice. */
typedef struct gml_st_index_entry {
    char *name, *shard;
} gml_st_index_entry;
GML_API gml_status gml_parse_safetensors_index(const void *buf, size_t len, const char *what,
                                       gml_st_index_entry **entries, int *n, char *err,
                                       size_t err_size);
GML_API void gml_free_safetensors_index(gml_st_index_entry *entries, int n);

/* A .npy file (v1, v2, v3) as one tensor named `name` (NULL: the file's base
 * name without ".npy", e.g. "x" for "dir/x.npy"). The data must end the
 * file: bytes after it are refused (np.load would ignore them). */
GML_API gml_context *gml_load_npy(const char *path, const char *name, char *err, size_t err_size);
/* As gml_load_npy, also taking float64 ('<f8', numpy's default), float16
 * ('<f2') and bool ('|b1') data, converted to an f32 tensor: float16 exactly,
 * float64 rounded to nearest (a finite value beyond float32's range is
 * refused, naming it), bool as 0 or 1. *converted_from (if not NULL) is set
 * to NULL for f32/i32 files, else to "float64", "float16" or "bool". Other
 * dtypes are refused with a message saying how to convert them. */
GML_API gml_context *gml_load_npy_converted(const char *path, const char *name,
                                    const char **converted_from, char *err, size_t err_size);
GML_API gml_context *gml_parse_npy_converted(const void *buf, size_t len, const char *what,
                                     const char *name, const char **converted_from, char *err,
                                     size_t err_size);
/* The same from bytes in memory; `what` names the source in messages. */
GML_API gml_context *gml_parse_safetensors(const void *buf, size_t len, const char *what, char *err,
                                   size_t err_size);
GML_API gml_context *gml_parse_npy(const void *buf, size_t len, const char *what, const char *name,
                           char *err, size_t err_size);
/* Writes tensors under their names (which must differ, and be printable:
 * no byte below 0x20 nor 0x7f, as the loader wants) / one tensor; .npy
 * files are version 1.0 with the data at a multiple of 64 bytes, as numpy
 * writes them. Types: safetensors F32, I32, F16 and BF16 (the bits as they
 * are), .npy '<f4', '<i4' and '<f2' (numpy has no bf16); a q8_0 tensor (and
 * bf16 for .npy) is refused with a message saying how to convert it.
 * GML_OK, or GML_ERR_INVALID (bad arguments: no data, duplicate names, a
 * type the format lacks) / GML_ERR_IO / GML_ERR_NOMEM with a message in err. */
GML_API gml_status gml_save_safetensors(const char *path, const gml_tensor *const *tensors, int n,
                                char *err, size_t err_size);
GML_API gml_status gml_save_npy(const char *path, const gml_tensor *t, char *err, size_t err_size);

/* ---- temporary files and fatal signals ------------------------------------
 * A save writes "<path>.tmp.<pid>.<n>" and renames it into place; on any
 * error it removes it. A signal whose default action ends the process would
 * leave it behind, so while such a file exists its name is in a fixed
 * table of GML_CLEANUP_SLOTS paths (written before the file is created).
 * The library installs no signal handler by itself (a process's signal
 * dispositions are its program's): a program that wants temporary files
 * gone when it is killed calls gml_cleanup_on_signals() once, early. That
 * installs, for SIGHUP, SIGINT, SIGPIPE, SIGTERM and SIGXFSZ where the
 * action is still the default (an ignored signal or the program's own
 * handler is left alone), a handler that unlinks every path in the table,
 * then rmdirs them (directories registered by the program, once empty),
 * restores the default action and raises the signal again, so the process
 * still dies of it (a shell sees 128 + the signal number). False if a
 * sigaction call failed.
 * SIGXFSZ (a write past `ulimit -f`) is better ignored, as POSIX allows:
 * signal(SIGXFSZ, SIG_IGN) makes the write fail with EFBIG instead, and the
 * save fails with "<path>: write failed: File too large" and cleans up as
 * for any error. run-graph does both.
 * gml_cleanup_register adds a program's own file (or a directory it made)
 * to the table: the slot (>= 0) to pass to gml_cleanup_unregister once the
 * file is renamed or removed, or -1 (the table is full, or the path has
 * 4096 bytes or more: then nothing removes it on a signal). Thread-safe;
 * a slot's path must not change while a signal could be handled. */
#define GML_CLEANUP_SLOTS 64
GML_API bool gml_cleanup_on_signals(void);
GML_API int gml_cleanup_register(const char *path);
GML_API void gml_cleanup_unregister(int slot);

/* ---- graph files ----------------------------------------------------------
 * A small text format for graphs, so a new attention variant needs no
 * recompiling. One statement per line; `#` starts a comment:
 *
 *     # ggmlite graph 1
 *     let dk = D / H                      # integer symbols; B, T, D, H... may
 *     input x f32 [B, T, D]               #   also come from the caller
 *     param w_q.weight f32 [D, D]
 *     q = linear(x, w_q.weight)           # [B, T, D]
 *     qh = permute(reshape(q, [B, T, H, dk]), [0, 2, 1, 3])
 *     a = softmax(s, scale=1/sqrt(dk), causal=true)
 *     output out
 *     output a
 *
 * `input`/`param` declare leafs (the caller binds them to tensors, or they are
 * made in the context); `let` defines a symbol; `NAME = op(args)` applies an
 * op or builder-only form of the registry (gml_form_*, ggmlite.h) with
 * arguments positional or name=value: the table of them all is in
 * tools/graphs/README.md ("Ops", made by gml_write_op_table); calls nest;
 * `output` lists results in order. Numbers are expressions over + - * / ( )
 * and sqrt(); sizes must come out whole. A lone symbol in an input's shape
 * takes its value from the bound tensor. A declaration ending in `optional`
 * that the binder leaves unbound is `none` (`optional default none` says so
 * explicitly, which a binder may require of inputs): none is accepted where a
 * tensor is optional (linear's bias, softmax's mask; add/mul(a, none) is a,
 * add/mul(none, b) is b), and a call needing a tensor that is none is none. Booleans (causal=) take true, false
 * or a number (0 is false), e.g. a caller's symbol.
 * The full reference: tools/graphs/README.md. */

typedef struct gml_graph_binder {
    /* Returns the tensor to use for a declared input or param, or NULL to
     * have the parser create a leaf in the context. A bound tensor's type and
     * shape must match the declaration. */
    gml_tensor *(*bind)(void *user, const char *name, bool is_param);
    void *user;
    /* Symbols known before the file is read (e.g. B, T from the command line). */
    const char *const *sym_names;
    const int64_t *sym_values;
    int n_syms;
    /* NULL, or [n_syms]: set after a parse to whether the file reads each of
     * those symbols (so a caller can tell a user that a setting of theirs
     * changes nothing). */
    bool *sym_used;
    /* For an `optional` declaration bind left unbound: true makes a leaf as
     * for any other declaration, false (or no callback) makes the name none. */
    bool (*make_optional)(void *user, const char *name, bool is_param);
    /* true: an `optional` input (not a param) that is left unbound (bind
     * gave NULL, make_optional false) is an error unless its declaration
     * ends `optional default none`; false: it is none either way. */
    bool optional_needs_default;
} gml_graph_binder;

/* Builds the graph text in ctx (a UTF-8 byte-order mark at its start is
 * skipped); writes up to max_outputs output tensors and returns their
 * number, or -1 with "file:line:col: what" in err. */
GML_API int gml_parse_graph(gml_context *ctx, const char *text, size_t len, const char *what,
                    const gml_graph_binder *binder, gml_tensor **outputs, int max_outputs,
                    char *err, size_t err_size);
GML_API int gml_load_graph(gml_context *ctx, const char *path, const gml_graph_binder *binder,
                   gml_tensor **outputs, int max_outputs, char *err, size_t err_size);
/* Writes g's leafs and nodes as graph text (GML_FLAG_PARAM leafs as param,
 * other leafs as input), outputs listed in the given order; each node as
 * gml_format_node writes its call. */
GML_API gml_status gml_save_graph(const char *path, const gml_graph *g, gml_tensor *const *outputs,
                          int n_outputs, char *err, size_t err_size);
/* The ops a graph file can call, as the Markdown table of tools/graphs/
 * README.md: a row per form of the registry, "| `softmax(x, mask=none,
 * scale=1, causal=false)` | arguments | result |" (run-graph --list-ops). */
GML_API void gml_write_op_table(FILE *f);

#ifdef __cplusplus
}
#endif
#endif /* GGMLITE_IO_H */
