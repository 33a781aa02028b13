/* What the AMX tests share (test_amx_bf16.c, test_amx_q8.c,
 * test_flash_attn_bf16.c built as test_flash_attn_amx): the --opt-in
 * argument, and the cases GGMLITE_AMX=1 can meet on a CPU (no feature, no
 * permission, the real tiles). Include after check.h and
 * ggmlite/internal.h (through the ops' headers). */
#ifndef GGMLITE_TESTS_AMX_CHECK_H
#define GGMLITE_TESTS_AMX_CHECK_H

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

#endif /* GGMLITE_TESTS_AMX_CHECK_H */
