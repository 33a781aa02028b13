/* What the AMX tests share (test_amx_bf16.c, test_amx_q8.c,
 * test_flash_attn_bf16.c built as test_flash_attn_amx): the --opt-in
 * argument, the cases GGMLITE_AMX=1 can meet on a CPU (no feature, no
 * permission, the real tiles), and the one-time stderr line that says why
 * GGMLITE_AMX=1 does not run AMX, caught and read. Include after check.h
 * and ggmlite/internal.h (through the ops' headers), with
 * _POSIX_C_SOURCE 200809L defined first (fileno, dup). */
#ifndef GGMLITE_TESTS_AMX_CHECK_H
#define GGMLITE_TESTS_AMX_CHECK_H

#include <unistd.h>

/* --opt-in (tests/CMakeLists.txt runs it with GGMLITE_AMX=1): *opted, and
 * false (a failed check) when the environment does not have it. */
static inline bool amx_check_args(int argc, char **argv, bool *opted) {
    *opted = argc > 1 && strcmp(argv[1], "--opt-in") == 0;
    if (!*opted) return true;
    const char *env = getenv("GGMLITE_AMX");
    return CHECK(env && strcmp(env, "1") == 0, "--opt-in runs with GGMLITE_AMX=1 (tests/CMakeLists.txt)");
}

/* Whether the default (GGMLITE_AMX unset) can be checked here: not when
 * the environment sets it (said on stdout). */
static inline bool amx_check_default_env(void) {
    const char *env = getenv("GGMLITE_AMX");
    if (env) printf("GGMLITE_AMX is set (%s) in this environment: the default case is not checked\n", env);
    return !env;
}

/* With GGMLITE_AMX=1: whether the real tile kernel named what (picked:
 * handed out at AVX-512) should run here, the CPU having feature f (named
 * fname) and Linux's permission; checks that it was picked where it should
 * be and only there, and says on stdout why a real kernel is skipped. */
static inline bool amx_check_real(bool picked, gml_cpu_feature f, const char *fname, const char *what) {
    int err = 0;
    if (!gml_cpu_has_feature(f)) {
        CHECK(!picked, "AMX picked on a CPU without %s", fname);
        printf("skipped: %s (this CPU has no %s); the fallback checked\n", what, fname);
        return false;
    }
    if (!gml_cpu_amx_permit(&err)) {
        CHECK(!picked, "AMX picked without Linux's permission");
        printf("skipped: %s (Linux refused the permission: %s)\n", what, strerror(err));
        return false;
    }
    CHECK(picked, "AMX not picked on a CPU with %s and the permission (a build without it?)", fname);
    return true;
}

/* What pick(isa) writes on stderr (at most 1 KiB), and whether it handed
 * something out; stderr goes to a temporary file meanwhile. */
static inline const char *amx_check_stderr(const void *(*pick)(gml_isa), gml_isa isa, bool *picked) {
    static char said[1024];
    said[0] = '\0';
    FILE *f = tmpfile();
    fflush(stderr);
    const int saved = dup(STDERR_FILENO);
    if (!CHECK(f && saved >= 0 && dup2(fileno(f), STDERR_FILENO) >= 0, "catching stderr")) {
        *picked = pick(isa) != NULL;
        if (f) fclose(f);
        return said;
    }
    *picked = pick(isa) != NULL;
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    rewind(f);
    const size_t n = fread(said, 1, sizeof said - 1, f);
    said[n] = '\0';
    fclose(f);
    fputs(said, stderr); /* still shown */
    return said;
}

/* The first AMX pick of a kind at AVX-512 with GGMLITE_AMX=1 (pick, which
 * wraps gml_amx_bf16_pick, gml_amx_q8_pick or gml_flash_amx_pick): where
 * it hands nothing out, one line on stderr that names runs ("bf16 matmuls
 * run", "int8 matmuls run", "bf16 flash attention runs") as what runs
 * without AMX; where it hands a kernel out, nothing. Returns whether it
 * handed one out. */
static inline bool amx_check_refusal(const void *(*pick)(gml_isa), const char *runs) {
    bool picked = false;
    const char *said = amx_check_stderr(pick, GML_ISA_AVX512, &picked);
    if (picked) {
        CHECK(said[0] == '\0', "AMX picked, yet stderr says: %s", said);
    } else {
        char want[128];
        snprintf(want, sizeof want, "; %s without AMX\n", runs);
        CHECK(strncmp(said, "ggmlite: GGMLITE_AMX=1: ", 24) == 0 && strstr(said, want) &&
                  strchr(said, '\n') == said + strlen(said) - 1,
              "not picked: stderr should say once why and that %s without AMX; it says: \"%s\"", runs, said);
    }
    return picked;
}

#endif /* GGMLITE_TESTS_AMX_CHECK_H */
