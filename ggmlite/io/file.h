/* File helpers shared by the file formats (npy.c, safetensors.c) and the
 * tools: one-line messages into a caller's buffer, a byte source that is
 * either memory or an open file (so one parser serves gml_parse_* and
 * gml_load_*), whole-file reads, and atomic writes (a temporary file in the
 * same directory, renamed into place). Internal; not installed. */
#ifndef GGMLITE_FILE_H
#define GGMLITE_FILE_H

#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <inttypes.h>
#include <string.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "ggmlite's file formats are little-endian and are read by memcpy: little-endian hosts only"
#endif

#define GML_MIN(a, b) ((a) < (b) ? (a) : (b))
#define GML_MAX(a, b) ((a) > (b) ? (a) : (b))
/* "name [2,8,10,64]" pieces for messages. */
#define GML_SHAPE(t, buf) gml_format_shape((t), (buf), sizeof(buf))

/* n rounded up to a multiple of a. */
static inline size_t gml_round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/* Writes a message into err (nothing if err is NULL or err_size is 0) and
 * returns false, so readers can `return gml_errf(err, size, ...)`. */
bool gml_errf(char *err, size_t err_size, const char *fmt, ...) GML_PRINTF(3, 4);

/* Where each public function of io.h starts (its "Misuse" rule): if p is
 * NULL, writes "<function>: <p> is NULL" into err (nothing if err is NULL)
 * and for the calling thread (gml_last_error(NULL)), and returns ret. */
void gml_io_null(const char *fn, const char *arg, char *err, size_t err_size);
#define GML_IO_NONNULL(p, ret, err, err_size)                   \
    do {                                                        \
        if (!(p)) {                                             \
            gml_io_null(__func__, #p, (err), (err_size));       \
            return ret;                                         \
        }                                                       \
    } while (0)

/* s (text from a file: any bytes) fit for a one-line message: bytes below
 * 0x20, 0x7f and backslashes as \xNN, cut to size - 1 bytes with "..." at
 * the end when too long (size >= 8). Returns buf. */
const char *gml_printable(const char *s, char *buf, size_t size);
/* The same for n bytes at s, which may include NUL (shown as \x00). */
const char *gml_printable_n(const char *s, size_t n, char *buf, size_t size);

/* Little-endian integers at p (any alignment). */
static inline uint64_t gml_le64(const unsigned char *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}
static inline uint32_t gml_le32(const unsigned char *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint16_t gml_le16(const unsigned char *p) { return (uint16_t)(p[0] | p[1] << 8); }
static inline void gml_put_le64(unsigned char *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}
static inline void gml_put_le32(unsigned char *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

/* Bytes of a dense f32/i32 array of shape ne[0..n-1] (sizes >= 1): 4 times
 * the product, or UINT64_MAX when that would pass 2^62 (never wraps). */
static inline uint64_t gml_dense_bytes(const int64_t *ne, int n) {
    uint64_t b = 4;
    for (int i = 0; i < n; i++) {
        if (b > ((uint64_t)1 << 62) / (uint64_t)ne[i]) return UINT64_MAX;
        b *= (uint64_t)ne[i];
    }
    return b;
}
/* gml_dense_bytes's result for a message: "4096" or "more than 2^62". */
static inline const char *gml_bytes_text(uint64_t b, char buf[24]) {
    if (b == UINT64_MAX) return "more than 2^62";
    snprintf(buf, 24, "%" PRIu64, b);
    return buf;
}

/* ---- reading ------------------------------------------------------------ */

/* safetensors.c: what the first 8 bytes of a file say it is when it is not
 * safetensors ("a zip archive (...)"), or NULL; and the hint that follows. */
const char *gml_st_other_format(const unsigned char b[8]);
#define GML_ST_CONVERT_HINT                                                                  \
    "; convert a PyTorch state_dict with tools/export_safetensors.py (torch.save file or module " \
    "-> .safetensors)"


/* Where a reader's bytes come from: a buffer in memory or an open regular
 * file. `what` names it in messages (the path, or the caller's label). */
typedef struct gml_source {
    const char *what;
    uint64_t size;              /* bytes available */
    const unsigned char *buf;   /* memory source, or NULL */
    int fd;                     /* file source (when buf is NULL) */
} gml_source;

static inline gml_source gml_source_memory(const void *buf, size_t len, const char *what) {
    return (gml_source){.what = what ? what : "<memory>", .size = len, .buf = buf, .fd = -1};
}
/* Opens a regular file: "<path>: cannot open: <errno text>" on failure, and
 * "<path>: is a FIFO, not a regular file" (a directory, a character or block
 * device, a socket) at once, without blocking. Every file the io library
 * reads is opened here. */
bool gml_source_open(gml_source *s, const char *path, char *err, size_t err_size);
void gml_source_close(gml_source *s);
/* Copies bytes [offset, offset + n) into dst. Fails (with a message naming
 * the range and the size) if they are not all there. */
bool gml_source_read(const gml_source *s, uint64_t offset, void *dst, size_t n, char *err,
                     size_t err_size);

/* A whole file into a malloc'd buffer (*buf, *len; the caller frees *buf;
 * one extra NUL byte follows the content). */
bool gml_read_file(const char *path, void **buf, size_t *len, char *err, size_t err_size);

/* ---- writing ------------------------------------------------------------ */

/* An output written to "<path>.tmp.<pid>.<n>" and renamed to path by commit;
 * abort (or a failed commit) removes the temporary file, so a failed save
 * never leaves a partial file at path. While it exists its name is in the
 * cleanup table, so gml_cleanup_on_signals's handler removes it too. Messages: "<path>: <what failed>:
 * <errno text>". */
typedef struct gml_outfile {
    const char *path;
    char *tmp;
    FILE *f;
    int slot; /* tmp's place in the cleanup table (gml_cleanup_register), or -1 */
} gml_outfile;

bool gml_outfile_open(gml_outfile *out, const char *path, char *err, size_t err_size);
bool gml_outfile_write(gml_outfile *out, const void *p, size_t n, char *err, size_t err_size);
/* t's elements in logical C order (outermost index slowest), whatever its
 * strides: a permuted or sliced view writes what it shows. */
bool gml_outfile_write_tensor(gml_outfile *out, const gml_tensor *t, char *err, size_t err_size);
/* Flushes, syncs, closes and renames into place; on failure removes the
 * temporary file. Either way out is finished. */
bool gml_outfile_commit(gml_outfile *out, char *err, size_t err_size);
void gml_outfile_abort(gml_outfile *out);

#endif /* GGMLITE_FILE_H */
