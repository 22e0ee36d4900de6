/* A process for gcore: maps a library named like NCCL so the core's NT_FILE lists it. */
#include <dlfcn.h>
#include <stdio.h>
#include <unistd.h>
int main(int argc, char **argv) {
    void *h = dlopen(argc > 1 ? argv[1] : "./libnccl.so.2.21.5", RTLD_NOW);
    if (!h) { fprintf(stderr, "%s\n", dlerror()); return 1; }
    printf("ready\n"); fflush(stdout);
    for (;;) pause();
}
