/* dlopen()s the plugin (plugin.c) given on the command line and runs it. */
#include <dlfcn.h>
#include <stdio.h>

int main(int argc, char **argv) {
    if (argc != 2) return fprintf(stderr, "usage: plugin_loader PLUGIN.so\n"), 2;
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) return fprintf(stderr, "dlopen: %s\n", dlerror()), 1;
    float (*run)(void);
    *(void **)&run = dlsym(h, "plugin_run");
    if (!run) return fprintf(stderr, "dlsym: %s\n", dlerror()), 1;
    float r = run();
    printf("plugin_run() = %g\n", r);
    dlclose(h);
    return r == 7.0f ? 0 : 1;
}
