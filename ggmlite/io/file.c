/* File helpers: messages, byte sources, whole-file reads, atomic writes. */
#define _XOPEN_SOURCE 700 /* pread, fdopen, fileno, fsync */
#include "file.h"

#include <assert.h>

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bool gml_errf(char *err, size_t err_size, const char *fmt, ...) {
    if (err && err_size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, err_size, fmt, ap);
        va_end(ap);
    }
    return false;
}

void gml_io_null(const char *fn, const char *arg, char *err, size_t err_size) {
    gml_errf(err, err_size, "%s: %s is NULL", fn, arg);
    gml_set_error(NULL, "%s: %s is NULL", fn, arg);
}

static bool plain(unsigned char c) { return c >= 0x20 && c != 0x7f && c != '\\'; }

const char *gml_printable_n(const char *s, size_t n, char *buf, size_t size) {
    size_t full = 0; /* the escaped length */
    for (size_t i = 0; i < n; i++) full += plain((unsigned char)s[i]) ? 1 : 4;
    bool cut = full >= size;
    size_t room = cut ? size - 4 : size - 1, k = 0; /* size >= 8: see file.h */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (k + (plain(c) ? 1 : 4) > room) break;
        if (plain(c)) buf[k++] = (char)c;
        else k += (size_t)snprintf(buf + k, 5, "\\x%02x", c);
    }
    if (cut) {
        memcpy(buf + k, "...", 3);
        k += 3;
    }
    buf[k] = '\0';
    return buf;
}

const char *gml_printable(const char *s, char *buf, size_t size) {
    return gml_printable_n(s, strlen(s), buf, size);
}

/* ---- reading ------------------------------------------------------------ */

/* What a file that is not regular is, for a message. */
static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    return "a special file";
}

/* Opened without blocking (a FIFO with no writer would block open(), and its
 * reads would then wait on the writer), checked on the descriptor itself (no
 * race between a stat and the open), then made blocking again for pread. */
bool gml_source_open(gml_source *s, const char *path, char *err, size_t err_size) {
    *s = (gml_source){.what = path, .fd = -1};
    if (!path) return gml_errf(err, err_size, "(null): no path given");
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        struct stat st; /* a socket cannot be opened (ENXIO): say what it is */
        if (e == ENXIO && stat(path, &st) == 0 && !S_ISREG(st.st_mode))
            return gml_errf(err, err_size, "%s: is %s, not a regular file", path,
                            file_kind(st.st_mode));
        return gml_errf(err, err_size, "%s: cannot open: %s", path, strerror(e));
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return gml_errf(err, err_size, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return gml_errf(err, err_size, "%s: is %s, not a regular file", path, file_kind(st.st_mode));
    }
    int fl = fcntl(fd, F_GETFL);
    if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        return gml_errf(err, err_size, "%s: cannot clear O_NONBLOCK: %s", path, strerror(e));
    }
    s->fd = fd;
    s->size = (uint64_t)st.st_size;
    return true;
}

void gml_source_close(gml_source *s) {
    if (s->fd >= 0) close(s->fd);
    s->fd = -1;
}

bool gml_source_read(const gml_source *s, uint64_t offset, void *dst, size_t n, char *err,
                     size_t err_size) {
    if (offset > s->size || n > s->size - offset)
        return gml_errf(err, err_size,
                        "%s: offset %" PRIu64 ": %zu bytes wanted, but the file ends at byte %" PRIu64,
                        s->what, offset, n, s->size);
    if (s->buf) {
        if (n) memcpy(dst, s->buf + offset, n);
        return true;
    }
    char *p = dst;
    while (n > 0) {
        size_t chunk = GML_MIN(n, (size_t)1 << 30);
        ssize_t got = pread(s->fd, p, chunk, (off_t)offset);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0)
            return gml_errf(err, err_size, "%s: offset %" PRIu64 ": read failed: %s", s->what,
                            offset, strerror(errno));
        if (got == 0) /* the file shrank since we measured it */
            return gml_errf(err, err_size,
                            "%s: offset %" PRIu64 ": unexpected end of file (it was %" PRIu64
                            " bytes when opened)", s->what, offset, s->size);
        p += got;
        offset += (uint64_t)got;
        n -= (size_t)got;
    }
    return true;
}

bool gml_read_file(const char *path, void **buf, size_t *len, char *err, size_t err_size) {
    *buf = NULL;
    *len = 0;
    gml_source s;
    if (!gml_source_open(&s, path, err, err_size)) return false;
    if (s.size >= SIZE_MAX) {
        gml_source_close(&s);
        return gml_errf(err, err_size, "%s: %" PRIu64 " bytes is too large to read", path, s.size);
    }
    char *p = malloc((size_t)s.size + 1);
    if (!p) {
        gml_source_close(&s);
        return gml_errf(err, err_size, "%s: out of memory reading %" PRIu64 " bytes", path, s.size);
    }
    bool ok = gml_source_read(&s, 0, p, (size_t)s.size, err, err_size);
    gml_source_close(&s);
    if (!ok) {
        free(p);
        return false;
    }
    p[s.size] = '\0';
    *buf = p;
    *len = (size_t)s.size;
    return true;
}

/* ---- removed on a fatal signal ------------------------------------------
 * A fixed table a signal handler can read: a slot is claimed (BUSY) with a
 * compare-and-swap, its path written, then ARMED; the handler unlinks what
 * is ARMED, then rmdirs it (a directory a program made, once empty), and
 * calls nothing else that is not async-signal-safe. */

enum { SLOT_FREE, SLOT_BUSY, SLOT_ARMED };
#define CLEANUP_PATH 4096
static char cleanup_path[GML_CLEANUP_SLOTS][CLEANUP_PATH];
static atomic_int cleanup_state[GML_CLEANUP_SLOTS];
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "the signal handler needs lock-free atomics");

static const int FATAL_SIGNALS[] = {SIGHUP, SIGINT, SIGPIPE, SIGTERM, SIGXFSZ};
enum { N_FATAL = sizeof FATAL_SIGNALS / sizeof *FATAL_SIGNALS };

/* Sets an owned slot's path (slot < 0: nothing). */
static void cleanup_set(int slot, const char *path) {
    if (slot < 0) return;
    atomic_store(&cleanup_state[slot], SLOT_BUSY);
    size_t n = strlen(path);
    if (n >= CLEANUP_PATH) return; /* stays BUSY: never removed, still owned */
    memcpy(cleanup_path[slot], path, n + 1);
    atomic_store(&cleanup_state[slot], SLOT_ARMED);
}

int gml_cleanup_register(const char *path) {
    GML_IO_NONNULL(path, -1, NULL, 0);
    if (!path || strlen(path) >= CLEANUP_PATH) return -1;
    for (int i = 0; i < GML_CLEANUP_SLOTS; i++) {
        int expected = SLOT_FREE;
        if (atomic_compare_exchange_strong(&cleanup_state[i], &expected, SLOT_BUSY)) {
            cleanup_set(i, path);
            return i;
        }
    }
    return -1;
}

void gml_cleanup_unregister(int slot) {
    if (slot >= 0 && slot < GML_CLEANUP_SLOTS) atomic_store(&cleanup_state[slot], SLOT_FREE);
}

static void on_fatal_signal(int sig) {
    const int saved = errno;
    for (int i = 0; i < GML_CLEANUP_SLOTS; i++)
        if (atomic_load(&cleanup_state[i]) == SLOT_ARMED) unlink(cleanup_path[i]);
    for (int i = 0; i < GML_CLEANUP_SLOTS; i++) /* directories, emptied by the pass before */
        if (atomic_load(&cleanup_state[i]) == SLOT_ARMED) rmdir(cleanup_path[i]);
    /* Die of the signal, as without this handler: the default action, and
     * the signal again (blocked here, so delivered when the handler returns). */
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, NULL);
    raise(sig);
    errno = saved;
}

bool gml_cleanup_on_signals(void) {
    struct sigaction sa = {.sa_handler = on_fatal_signal};
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < N_FATAL; i++) sigaddset(&sa.sa_mask, FATAL_SIGNALS[i]);
    bool ok = true;
    for (int i = 0; i < N_FATAL; i++) {
        struct sigaction old;
        if (sigaction(FATAL_SIGNALS[i], NULL, &old) != 0) {
            ok = false;
            continue;
        }
        /* ignored, or the program's own handler: left alone */
        if ((old.sa_flags & SA_SIGINFO) || old.sa_handler != SIG_DFL) continue;
        if (sigaction(FATAL_SIGNALS[i], &sa, NULL) != 0) ok = false;
    }
    return ok;
}

/* ---- writing ------------------------------------------------------------ */

static _Atomic unsigned tmp_counter;

bool gml_outfile_open(gml_outfile *out, const char *path, char *err, size_t err_size) {
    *out = (gml_outfile){.path = path, .slot = -1};
    if (!path) return gml_errf(err, err_size, "(null): no path given");
    size_t cap = strlen(path) + 64;
    out->tmp = malloc(cap);
    if (!out->tmp) return gml_errf(err, err_size, "%s: out of memory", path);
    /* A fresh name each try; O_EXCL never reuses someone else's file. The
     * mode goes through the umask, as for any new file. The name is in the
     * cleanup table before the file exists (a stale file of this very name,
     * our pid's, is all a signal in between could remove). */
    for (int attempt = 0;; attempt++) {
        snprintf(out->tmp, cap, "%s.tmp.%ld.%u", path, (long)getpid(), tmp_counter++);
        if (out->slot < 0) out->slot = gml_cleanup_register(out->tmp);
        else cleanup_set(out->slot, out->tmp);
        int fd = open(out->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
        if (fd >= 0) {
            out->f = fdopen(fd, "wb");
            if (out->f) return true;
            int e = errno;
            close(fd);
            unlink(out->tmp);
            errno = e;
        }
        if (fd >= 0 || errno != EEXIST || attempt == 100) {
            gml_errf(err, err_size, "%s: cannot create temporary file %s: %s", path, out->tmp,
                     strerror(errno));
            gml_cleanup_unregister(out->slot);
            free(out->tmp);
            out->tmp = NULL;
            return false;
        }
    }
}

bool gml_outfile_write(gml_outfile *out, const void *p, size_t n, char *err, size_t err_size) {
    errno = 0;
    if (n && fwrite(p, 1, n, out->f) != n)
        return gml_errf(err, err_size, "%s: write failed: %s", out->path,
                        errno ? strerror(errno) : "unknown error");
    return true;
}

/* The address of t's element [i0, i1, i2, i3]. */
static const char *elem(const gml_tensor *t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
    return (const char *)t->data + i0 * (int64_t)t->nb[0] + i1 * (int64_t)t->nb[1] +
           i2 * (int64_t)t->nb[2] + i3 * (int64_t)t->nb[3];
}

bool gml_outfile_write_tensor(gml_outfile *out, const gml_tensor *t, char *err, size_t err_size) {
    if (gml_is_contiguous(t))
        return gml_outfile_write(out, t->data, (size_t)gml_nelements(t) * gml_type_size(t->type),
                                 err, err_size);
    /* Rows [i0, i1, i2, :], gathered element by element (4 or 2 bytes: the
     * savers take f32, i32, f16 and bf16) into a buffer. */
    enum { CHUNK = 4096 };
    unsigned char buf[CHUNK * 4];
    const size_t es = gml_type_size(t->type);
    assert(es == 4 || es == 2);
    const int64_t n = t->ne[3];
    for (int64_t i0 = 0; i0 < t->ne[0]; i0++)
        for (int64_t i1 = 0; i1 < t->ne[1]; i1++)
            for (int64_t i2 = 0; i2 < t->ne[2]; i2++)
                for (int64_t j0 = 0; j0 < n; j0 += CHUNK) {
                    int64_t m = GML_MIN((int64_t)CHUNK, n - j0);
                    for (int64_t j = 0; j < m; j++)
                        memcpy(buf + (size_t)j * es, elem(t, i0, i1, i2, j0 + j), es);
                    if (!gml_outfile_write(out, buf, (size_t)m * es, err, err_size)) return false;
                }
    return true;
}

static void finish(gml_outfile *out, bool remove_tmp) {
    if (out->tmp && remove_tmp) unlink(out->tmp);
    gml_cleanup_unregister(out->slot); /* renamed or removed: nothing to clean up */
    out->slot = -1;
    free(out->tmp);
    out->tmp = NULL;
    out->f = NULL;
}

bool gml_outfile_commit(gml_outfile *out, char *err, size_t err_size) {
    const char *step = NULL;
    if (fflush(out->f) != 0) step = "write failed";
    else if (fsync(fileno(out->f)) != 0) step = "sync failed";
    int e = errno;
    if (fclose(out->f) != 0 && !step) {
        step = "close failed";
        e = errno;
    }
    if (!step && rename(out->tmp, out->path) != 0) {
        step = "cannot rename the temporary file into place";
        e = errno;
    }
    if (step) {
        gml_errf(err, err_size, "%s: %s: %s", out->path, step, strerror(e));
        finish(out, true);
        return false;
    }
    finish(out, false);
    return true;
}

void gml_outfile_abort(gml_outfile *out) {
    if (out->f) fclose(out->f);
    finish(out, true);
}
