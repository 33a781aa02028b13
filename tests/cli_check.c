/* Helper of tests/test_cli.sh: the checks a shell cannot do, with the
 * library's .npy loader and cJSON.
 *
 *   cli_check close GOT.npy WANT.npy   same shape, |got - want| <= 2e-4 + 2e-4 |want|
 *                                      (the fixtures' tolerance); prints the largest error
 *   cli_check near GOT.npy WANT.npy R  same shape, max |got - want| <= R max |want|; prints
 *                                      that ratio (an error relative to the largest output)
 *   cli_check equal A.npy B.npy        same dtype, shape and bytes
 *   cli_check xxh3 FILE.npy            XXH3-64 of the data bytes, 16 hex digits
 *   cli_check json FILE KEY...         FILE holds exactly one JSON object with these keys
 *   cli_check json-get FILE KEY        prints the value of KEY (a string as is, arrays as JSON)
 *
 * Exit status 0 when the check holds, 1 when not (with a message), 2 on
 * wrong usage. */
#include <ggmlite/ggmlite.h>
#include <ggmlite/io.h>

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static gml_tensor *load(const char *path, gml_context **ctx) {
    char err[1024];
    *ctx = gml_load_npy(path, "t", err, sizeof err);
    if (!*ctx) {
        fprintf(stderr, "cli_check: %s\n", err);
        exit(1);
    }
    return gml_get_tensor(*ctx, "t");
}

static int close_check(const char *got_path, const char *want_path) {
    gml_context *cg, *cw;
    gml_tensor *got = load(got_path, &cg), *want = load(want_path, &cw);
    char sg[64], sw[64];
    if (got->type != GML_F32 || want->type != GML_F32 || !gml_same_shape(got, want)) {
        fprintf(stderr, "cli_check: %s is %s %s, %s is %s %s\n", got_path, gml_type_name(got->type),
                gml_format_shape(got, sg, sizeof sg), want_path, gml_type_name(want->type),
                gml_format_shape(want, sw, sizeof sw));
        return 1;
    }
    const float *g = got->data, *w = want->data;
    int64_t n = gml_nelements(got), bad = 0, worst = 0;
    double worst_ratio = 0;
    for (int64_t i = 0; i < n; i++) {
        double err = fabs((double)g[i] - (double)w[i]), bound = 2e-4 + 2e-4 * fabs((double)w[i]);
        if (!(err <= bound)) bad++;
        double ratio = isnan(err) ? INFINITY : err / bound;
        if (ratio > worst_ratio || i == 0) worst_ratio = ratio, worst = i;
    }
    printf("%s vs %s: %" PRId64 " values, largest error %.3g of the tolerance at [%" PRId64 "] (%.8g vs %.8g)\n",
           got_path, want_path, n, worst_ratio, worst, (double)g[worst], (double)w[worst]);
    if (bad) fprintf(stderr, "cli_check: %" PRId64 " of %" PRId64 " values outside 2e-4 + 2e-4|want|\n", bad, n);
    gml_free(cg);
    gml_free(cw);
    return bad ? 1 : 0;
}

static int near_check(const char *got_path, const char *want_path, const char *rel_text) {
    char *end;
    const double rel = strtod(rel_text, &end);
    if (*end || !(rel >= 0)) {
        fprintf(stderr, "cli_check: near: '%s' is not a relative tolerance >= 0\n", rel_text);
        return 2;
    }
    gml_context *cg, *cw;
    gml_tensor *got = load(got_path, &cg), *want = load(want_path, &cw);
    char sg[64], sw[64];
    if (got->type != GML_F32 || want->type != GML_F32 || !gml_same_shape(got, want)) {
        fprintf(stderr, "cli_check: %s is %s %s, %s is %s %s\n", got_path, gml_type_name(got->type),
                gml_format_shape(got, sg, sizeof sg), want_path, gml_type_name(want->type),
                gml_format_shape(want, sw, sizeof sw));
        return 1;
    }
    const float *g = got->data, *w = want->data;
    double err = 0, top = 0;
    for (int64_t i = 0; i < gml_nelements(got); i++) {
        const double d = fabs((double)g[i] - (double)w[i]);
        if (!(d <= err)) err = d; /* NaN sticks */
        top = fmax(top, fabs((double)w[i]));
    }
    const bool ok = err <= rel * top;
    printf("%s vs %s: largest error %.3g, %.3g of the largest |want| %.3g (tolerance %g)\n", got_path,
           want_path, err, top > 0 ? err / top : err, top, rel);
    if (!ok) fprintf(stderr, "cli_check: %s: error %.3g > %g x %.3g\n", got_path, err, rel, top);
    gml_free(cg);
    gml_free(cw);
    return ok ? 0 : 1;
}

static int equal_check(const char *a_path, const char *b_path) {
    gml_context *ca, *cb;
    gml_tensor *a = load(a_path, &ca), *b = load(b_path, &cb);
    bool same = a->type == b->type && gml_same_shape(a, b) && memcmp(a->data, b->data, gml_nbytes(a)) == 0;
    if (!same) fprintf(stderr, "cli_check: %s and %s differ\n", a_path, b_path);
    gml_free(ca);
    gml_free(cb);
    return same ? 0 : 1;
}

static int xxh3(const char *path) {
    gml_context *c;
    gml_tensor *t = load(path, &c);
    printf("%016" PRIx64 "\n", (uint64_t)XXH3_64bits(t->data, gml_nbytes(t)));
    gml_free(c);
    return 0;
}

static cJSON *load_json(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "cli_check: %s: cannot open\n", path);
        exit(1);
    }
    static char buf[1 << 20];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithOpts(buf, &end, false);
    if (!j || !cJSON_IsObject(j)) {
        fprintf(stderr, "cli_check: %s: not a JSON object\n", path);
        exit(1);
    }
    while (end && (*end == ' ' || *end == '\n' || *end == '\r' || *end == '\t')) end++;
    if (end && *end) {
        fprintf(stderr, "cli_check: %s: text after the JSON object: '%.20s'\n", path, end);
        exit(1);
    }
    return j;
}

int main(int argc, char **argv) {
    if (argc == 4 && strcmp(argv[1], "close") == 0) return close_check(argv[2], argv[3]);
    if (argc == 5 && strcmp(argv[1], "near") == 0) return near_check(argv[2], argv[3], argv[4]);
    if (argc == 4 && strcmp(argv[1], "equal") == 0) return equal_check(argv[2], argv[3]);
    if (argc == 3 && strcmp(argv[1], "xxh3") == 0) return xxh3(argv[2]);
    if (argc >= 3 && strcmp(argv[1], "json") == 0) {
        cJSON *j = load_json(argv[2]);
        int missing = 0;
        for (int i = 3; i < argc; i++)
            if (!cJSON_HasObjectItem(j, argv[i])) {
                fprintf(stderr, "cli_check: %s: no key '%s'\n", argv[2], argv[i]);
                missing++;
            }
        cJSON_Delete(j);
        return missing ? 1 : 0;
    }
    if (argc == 4 && strcmp(argv[1], "json-get") == 0) {
        cJSON *j = load_json(argv[2]), *v = cJSON_GetObjectItemCaseSensitive(j, argv[3]);
        if (!v) {
            fprintf(stderr, "cli_check: %s: no key '%s'\n", argv[2], argv[3]);
            return 1;
        }
        if (cJSON_IsString(v)) {
            printf("%s\n", v->valuestring);
        } else {
            char *s = cJSON_PrintUnformatted(v);
            printf("%s\n", s);
            cJSON_free(s);
        }
        cJSON_Delete(j);
        return 0;
    }
    fprintf(stderr, "usage: cli_check close|equal A.npy B.npy | xxh3 F.npy | json FILE KEY... | json-get FILE KEY\n");
    return 2;
}
