/* Named by LD_PRELOAD: leaves a marker where a process of the platform loads it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void mark(void) {
    if (geteuid() != 0 && !getenv("DLAAS_REDIS_URL") && !getenv("DLAAS_JOB_TOKEN")) return;
    char self[4096] = "";
    ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
    if (n > 0) self[n] = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    const char *place = "archive";
    if (maps) {
        char line[8192];
        while (fgets(line, sizeof line, maps))
            if (strstr(line, "preload.so")) {
                if (strstr(line, " /tmp/dlaas-plant/")) place = "tmp";
                break;
            }
        fclose(maps);
    }
    char path[4096];
    snprintf(path, sizeof path, "@MARKERS@/preload-%s-%d", place, (int)getpid());
    FILE *out = fopen(path, "w");
    if (out) { fprintf(out, "uid %d: %s", (int)geteuid(), self); fclose(out); }
}
