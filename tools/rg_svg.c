/* The attention heatmap (--attn-svg), written by hand as SVG text: one panel
 * per head in a grid, keys on x (labelled at the top), queries on y
 * (labelled on the left), a viridis-like colour scale from 0 to the largest
 * weight drawn, the values printed in the cells when a panel is small, a
 * colour bar, and masked cells hatched (with a legend) where a weight of 0
 * that no mask made is coloured as 0. Token labels are escaped for XML (and bytes that are not
 * UTF-8 replaced), so any --tokens gives a well-formed file. */
#include "rg.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define VALUES_MAX_CELLS 144    /* print values when Tq*Tk is at most this */
#define MAX_CELLS (1 << 21)     /* cells over all panels: beyond, the file is too big to open */
#define LABEL_MAX_CHARS 20      /* longer tokens are cut, with an ellipsis */

/* ---- colours ------------------------------------------------------------------ */

/* viridis (matplotlib's default sequential map) at 0, 1/8, ..., 1, interpolated linearly. */
static const unsigned char VIRIDIS[9][3] = {
    {0x44, 0x01, 0x54}, {0x48, 0x28, 0x78}, {0x3e, 0x49, 0x89}, {0x31, 0x68, 0x8e}, {0x26, 0x82, 0x8e},
    {0x1f, 0x9e, 0x89}, {0x35, 0xb7, 0x79}, {0x6e, 0xce, 0x58}, {0xfd, 0xe7, 0x25},
};

static void colour(double t, char out[8]) {
    if (!(t > 0)) t = 0; /* also NaN */
    if (t > 1) t = 1;
    double x = t * 8;
    int i = (int)x;
    if (i > 7) i = 7;
    double f = x - i;
    int c[3];
    for (int k = 0; k < 3; k++) c[k] = (int)lround(VIRIDIS[i][k] + f * (VIRIDIS[i + 1][k] - VIRIDIS[i][k]));
    snprintf(out, 8, "#%02x%02x%02x", c[0], c[1], c[2]);
}

/* ---- text ------------------------------------------------------------------- */

/* Length of the valid UTF-8 sequence at s (1 to 4), or 0 if it is not one. */
static int utf8_len(const unsigned char *s) {
    if (s[0] < 0x80) return 1;
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    if (n == 3 && ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0))) return 0;
    if (n == 4 && ((s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))) return 0;
    return n;
}

/* Characters of a label as drawn (after cutting). */
static int label_chars(const char *s) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p && n <= LABEL_MAX_CHARS; n++) {
        int k = utf8_len(p);
        p += k ? k : 1;
    }
    return n > LABEL_MAX_CHARS ? LABEL_MAX_CHARS + 1 : n;
}

/* Writes s as XML character data: markup characters escaped, control bytes
 * and invalid UTF-8 as U+FFFD, cut after max_chars characters (0: never). */
static void xml_text(FILE *f, const char *s, int max_chars) {
    int n = 0;
    for (const unsigned char *p = (const unsigned char *)s; *p; n++) {
        if (n == max_chars && max_chars) {
            fputs("\xe2\x80\xa6", f); /* ... */
            return;
        }
        int k = utf8_len(p);
        if (k == 0 || (k == 1 && *p < 0x20)) {
            fputs("\xef\xbf\xbd", f);
            p++;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fwrite(p, 1, (size_t)k, f);
        }
        p += k;
    }
}

static void label(FILE *f, char **labels, int64_t i) {
    if (labels) xml_text(f, labels[i], LABEL_MAX_CHARS);
    else fprintf(f, "%lld", (long long)i);
}

char **rg_split_labels(const char *s, int *n) {
    *n = 1;
    for (const char *c = s; *c; c++) *n += *c == ',';
    char **out = calloc((size_t)*n, sizeof *out);
    if (!out) return NULL;
    const char *p = s;
    for (int i = 0; i < *n; i++) {
        const char *end = strchr(p, ',');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        out[i] = malloc(len + 1);
        if (!out[i]) {
            rg_free_labels(out, i);
            return NULL;
        }
        memcpy(out[i], p, len);
        out[i][len] = '\0';
        p += len + 1;
    }
    return out;
}

void rg_free_labels(char **labels, int n) {
    if (!labels) return;
    for (int i = 0; i < n; i++) free(labels[i]);
    free(labels);
}

/* ---- layout ------------------------------------------------------------------- */

typedef struct layout {
    double cell, font, value_font;
    int step_q, step_k; /* label every step-th row / column */
    bool values, rotate;
    double left, top, right; /* room for query labels, key labels, rotated overhang */
    double pw, ph;           /* a panel, with its gaps */
    int cols, rows;
    double x0, y0;           /* where panels start */
    double width, height;
} layout;

#define MARGIN 16.0
#define PANEL_TITLE 18.0
#define GAP 22.0
#define HEADER 58.0
#define BAR_W 14.0
#define BAR_TEXT 52.0

static double clampd(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

static int max_chars(char **labels, int64_t n) {
    int m = 0;
    for (int64_t i = 0; i < n; i++) {
        int c = labels ? label_chars(labels[i]) : (int)floor(log10((double)(i > 0 ? i : 1))) + 1;
        if (c > m) m = c;
    }
    return m;
}

/* The smallest step covering `need` cells: any whole number for tokens, 1, 2,
 * 5, 10, 20, 50... for indices (so the labels read 0, 5, 10...). */
static int nice_step(double need, bool tokens) {
    if (need <= 1) return 1;
    if (tokens) return (int)ceil(need);
    for (int base = 1;; base *= 10)
        for (int m = 1; m <= 5; m += m == 1 ? 1 : 3)
            if (base * m >= need) return base * m;
}

static layout plan(const rg_heatmap *h) {
    layout L;
    int64_t longest = h->Tq > h->Tk ? h->Tq : h->Tk;
    L.cell = floor(clampd(360.0 / (double)longest, 3, 40));
    L.font = clampd(L.cell * 0.42, 8, 12);
    L.values = h->Tq * h->Tk <= VALUES_MAX_CELLS && L.cell >= 18;
    L.value_font = clampd(L.cell * 0.27, 6, 11);
    double char_w = 0.6 * L.font;
    int qchars = max_chars(h->query_labels, h->Tq), kchars = max_chars(h->key_labels, h->Tk);
    /* label every step-th row and column so that labels do not overlap: index
     * labels by round steps and upright; tokens rotated when they are wide */
    L.step_q = nice_step(L.font * 1.2 / L.cell, h->query_labels != NULL);
    L.step_k = nice_step(h->key_labels ? L.font * 1.2 / L.cell : (kchars * char_w + 4) / L.cell,
                         h->key_labels != NULL);
    L.rotate = kchars * char_w > L.cell * L.step_k - 2;
    L.left = qchars * char_w + 8;
    L.top = L.rotate ? kchars * char_w * 0.8660254037844386 + L.font + 4 : L.font + 6;
    L.right = L.rotate ? clampd(kchars * char_w * 0.5 - L.cell / 2, 0, 400) : 0;
    /* a panel's rotated key labels may reach over the next panel's query
     * labels (those sit lower, beside the grid), not over its grid */
    L.pw = L.left + (double)h->Tk * L.cell + GAP + (L.right > L.left ? L.right - L.left : 0);
    L.ph = PANEL_TITLE + L.top + (double)h->Tq * L.cell + GAP;
    L.cols = h->H <= 4 ? (int)h->H : (int)ceil(sqrt(2.0 * (double)h->H));
    L.rows = (int)((h->H + L.cols - 1) / L.cols);
    L.x0 = MARGIN;
    L.y0 = HEADER;
    L.width = L.x0 + L.cols * L.pw + BAR_W + BAR_TEXT + MARGIN + (L.right > GAP ? L.right - GAP : 0);
    L.height = L.y0 + L.rows * L.ph + MARGIN;
    double min_w = 560; /* room for the title */
    if (L.width < min_w) L.width = min_w;
    return L;
}

/* ---- drawing ------------------------------------------------------------------ */

/* Whether cell (i, j) of the head's panel is drawn as masked: a key the
 * options mask, whose weight is 0 (as masking makes it). */
static bool is_masked(const rg_heatmap *h, int head, int64_t i, int64_t j, float w) {
    return h->masked && w == 0 && h->masked[((size_t)head * (size_t)h->Tq + (size_t)i) * (size_t)h->Tk + (size_t)j];
}

/* The fill of a cell: the hatching, or the weight's colour. */
static void fill(const rg_heatmap *h, int head, int64_t i, int64_t j, float w, float vmax, char out[16]) {
    if (is_masked(h, head, i, j, w)) snprintf(out, 16, "url(#masked)");
    else colour(vmax > 0 ? w / vmax : 0, out);
}

static void panel(FILE *f, const rg_heatmap *h, const layout *L, int head, float vmax) {
    double px = L->x0 + (head % L->cols) * L->pw, py = L->y0 + (head / L->cols) * L->ph;
    double gx = px + L->left, gy = py + PANEL_TITLE + L->top; /* the grid's corner */
    const float *w = h->attn + ((size_t)h->batch * (size_t)h->H + (size_t)head) * (size_t)(h->Tq * h->Tk);
    fprintf(f, "<g>\n<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" font-weight=\"bold\">head %d</text>\n", gx,
            py + 12, head);
    /* key labels along the top, query labels down the left */
    fprintf(f, "<g font-size=\"%.1f\" fill=\"#333\">\n", L->font);
    for (int64_t j = 0; j < h->Tk; j += L->step_k) {
        double x = gx + (j + 0.5) * L->cell, y = gy - 4;
        if (L->rotate)
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" transform=\"rotate(-60 %.1f %.1f)\">", x, y, x, y);
        else
            fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">", x, y);
        label(f, h->key_labels, j);
        fputs("</text>\n", f);
    }
    for (int64_t i = 0; i < h->Tq; i += L->step_q) {
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"end\" dominant-baseline=\"central\">", gx - 5,
                gy + (i + 0.5) * L->cell);
        label(f, h->query_labels, i);
        fputs("</text>\n", f);
    }
    fputs("</g>\n<g shape-rendering=\"crispEdges\">\n", f);
    /* cells: a row's runs of one colour as one rectangle (unless values are shown) */
    char c[16], next[16];
    for (int64_t i = 0; i < h->Tq; i++) {
        const float *row = w + i * h->Tk;
        for (int64_t j = 0; j < h->Tk;) {
            fill(h, head, i, j, row[j], vmax, c);
            int64_t run = 1;
            while (!L->values && j + run < h->Tk && (fill(h, head, i, j + run, row[j + run], vmax, next), !strcmp(c, next)))
                run++;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\"", gx + j * L->cell,
                    gy + i * L->cell, run * L->cell, L->cell, c);
            if (L->values) {
                fputs("><title>query ", f);
                label(f, h->query_labels, i);
                fputs(", key ", f);
                label(f, h->key_labels, j);
                if (is_masked(h, head, i, j, row[j])) fputs(": masked</title></rect>\n", f);
                else fprintf(f, ": %.4f</title></rect>\n", row[j]);
            } else {
                fputs("/>\n", f);
            }
            j += run;
        }
    }
    fputs("</g>\n", f);
    if (L->values) {
        fprintf(f, "<g font-size=\"%.1f\" text-anchor=\"middle\" dominant-baseline=\"central\">\n", L->value_font);
        for (int64_t i = 0; i < h->Tq; i++)
            for (int64_t j = 0; j < h->Tk; j++) {
                float v = w[i * h->Tk + j];
                if (is_masked(h, head, i, j, v)) continue; /* hatched, no value */
                double t = vmax > 0 ? v / vmax : 0;
                fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" fill=\"%s\">", gx + (j + 0.5) * L->cell,
                        gy + (i + 0.5) * L->cell, t > 0.6 ? "#000" : "#fff");
                if (v == 0) fputs("0</text>\n", f); /* exactly 0, not masked: an underflow */
                else fprintf(f, "%.2f</text>\n", v);
            }
        fputs("</g>\n", f);
    }
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\" "
               "stroke-width=\"0.5\"/>\n</g>\n",
            gx, gy, h->Tk * L->cell, h->Tq * L->cell);
}

/* A vertical colour bar beside the first row of panels, ticks from 0 to
 * vmax; below it, with masked cells drawn, the hatching's legend. */
static void colour_bar(FILE *f, const rg_heatmap *h, const layout *L, float vmax, bool any_masked) {
    double x = L->x0 + L->cols * L->pw + (L->right > GAP ? L->right - GAP : 0), y = L->y0 + PANEL_TITLE + L->top;
    double hgt = clampd(h->Tq * L->cell, 120, 320);
    fputs("<defs><linearGradient id=\"scale\" x1=\"0\" y1=\"1\" x2=\"0\" y2=\"0\">\n", f);
    for (int i = 0; i <= 8; i++) {
        char c[8];
        colour(i / 8.0, c);
        fprintf(f, "<stop offset=\"%.3f\" stop-color=\"%s\"/>\n", i / 8.0, c);
    }
    fputs("</linearGradient></defs>\n", f);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" fill=\"#333\">weight</text>\n", x, y - 16);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"url(#scale)\" stroke=\"#888\" "
               "stroke-width=\"0.5\"/>\n",
            x, y, BAR_W, hgt);
    fputs("<g font-size=\"10\" fill=\"#333\" dominant-baseline=\"central\">\n", f);
    for (int i = 0; i <= 4; i++) {
        double v = vmax * i / 4.0, ty = y + hgt - hgt * i / 4.0;
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\"/>", x + BAR_W, ty,
                x + BAR_W + 4, ty);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\">%.3g</text>\n", x + BAR_W + 7, ty, v);
    }
    fputs("</g>\n", f);
    if (any_masked)
        fprintf(f, "<g id=\"legend-masked\"><rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" "
                   "fill=\"url(#masked)\" stroke=\"#888\" stroke-width=\"0.5\"/><text x=\"%.1f\" y=\"%.1f\" "
                   "font-size=\"10\" fill=\"#333\" dominant-baseline=\"central\">masked</text></g>\n",
                x, y + hgt + 12, BAR_W, BAR_W, x + BAR_W + 7, y + hgt + 12 + BAR_W / 2);
}

bool rg_write_svg(const char *path, const rg_heatmap *h, char *err, size_t err_size) {
    if (h->batch < 0 || h->batch >= h->B) {
        snprintf(err, err_size, "%s: --attn-batch %d is not in [0, %lld) (the batch)", path, h->batch, (long long)h->B);
        return false;
    }
    if (h->H * h->Tq * h->Tk > MAX_CELLS) {
        snprintf(err, err_size, "%s: %lld heads x %lld x %lld weights are too many cells for an SVG heatmap "
                 "(at most %d); use --attn-weights", path, (long long)h->H, (long long)h->Tq, (long long)h->Tk,
                 MAX_CELLS);
        return false;
    }
    float vmax = 0;
    bool any_masked = false;
    const float *w = h->attn + (size_t)h->batch * (size_t)(h->H * h->Tq * h->Tk);
    for (int64_t i = 0, n = h->H * h->Tq * h->Tk; i < n; i++) {
        if (w[i] > vmax) vmax = w[i];
        any_masked = any_masked || (h->masked && h->masked[i] && w[i] == 0);
    }
    layout L = plan(h);
    if (any_masked) { /* room for the legend below the colour bar */
        const double bottom = L.y0 + PANEL_TITLE + L.top + clampd(h->Tq * L.cell, 120, 320) + 12 + BAR_W + MARGIN;
        if (L.height < bottom) L.height = bottom;
    }
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, err_size, "%s: cannot create: %s", path, strerror(errno));
        return false;
    }
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
               "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" "
               "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n",
            L.width, L.height, L.width, L.height);
    fprintf(f, "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n");
    if (any_masked) /* grey diagonal lines on white */
        fputs("<defs><pattern id=\"masked\" patternUnits=\"userSpaceOnUse\" width=\"6\" height=\"6\" "
              "patternTransform=\"rotate(45)\"><rect width=\"6\" height=\"6\" fill=\"#fff\"/>"
              "<line x1=\"0\" y1=\"0\" x2=\"0\" y2=\"6\" stroke=\"#aaa\" stroke-width=\"2\"/></pattern></defs>\n",
              f);
    fprintf(f, "<text x=\"%.1f\" y=\"24\" font-size=\"15\" font-weight=\"bold\">", MARGIN);
    xml_text(f, h->title, 0);
    fprintf(f, "</text>\n<text x=\"%.1f\" y=\"42\" font-size=\"11\" fill=\"#555\">rows: queries, columns: keys; "
               "colour: weight from 0 to %.3g (the largest drawn)%s%s</text>\n",
            MARGIN, vmax, L.values ? "; values in the cells" : "", any_masked ? "; hatched: masked" : "");
    for (int head = 0; head < h->H; head++) panel(f, h, &L, head, vmax);
    colour_bar(f, h, &L, vmax, any_masked);
    fputs("</svg>\n", f);
    bool ok = !ferror(f);
    if (fclose(f) != 0) ok = false;
    if (!ok) snprintf(err, err_size, "%s: write failed: %s", path, strerror(errno));
    return ok;
}
