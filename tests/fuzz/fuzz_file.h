/* tests/fuzz/fuzz_file.h — for the fuzz targets whose parser reads files: a private temporary
 * directory (made under $TMPDIR, else /tmp, at the first use and removed at exit with what is in
 * it) and the input written there under a file name. Header-only; a target keeps one
 * numla_fuzz_file per directory it needs. */
#ifndef NUMLA_TESTS_FUZZ_FILE_H
#define NUMLA_TESTS_FUZZ_FILE_H

#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

typedef struct numla_fuzz_file {
    const char *target; /* the target's name, which starts its abort line */
    const char *tag;    /* the directory is numla-fuzz-<tag>-XXXXXX */
    char dir[256];      /* "" until made */
} numla_fuzz_file;

static numla_fuzz_file *numla_fuzz_file_made_[4];
static int numla_fuzz_file_nmade_;

static void numla_fuzz_file_cleanup_(void)
{
    for (int i = 0; i < numla_fuzz_file_nmade_; i++) {
        const char *dir = numla_fuzz_file_made_[i]->dir;
        DIR *d = opendir(dir);
        struct dirent *e;
        while (d && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char path[600];
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
        if (d)
            closedir(d);
        rmdir(dir);
    }
}

static void numla_fuzz_file_die_(const numla_fuzz_file *f, const char *what, const char *msg)
{
    fprintf(stderr, "%s: %s (%s)\n", f->target, what, msg);
    abort();
}

/* f's directory, made at the first call. */
static const char *numla_fuzz_file_dir(numla_fuzz_file *f)
{
    if (!f->dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(f->dir, sizeof f->dir, "%s/numla-fuzz-%s-XXXXXX", tmp && tmp[0] ? tmp : "/tmp",
                 f->tag);
        if (!mkdtemp(f->dir))
            numla_fuzz_file_die_(f, "mkdtemp failed", f->dir);
        if (numla_fuzz_file_nmade_ == 0)
            atexit(numla_fuzz_file_cleanup_);
        if (numla_fuzz_file_nmade_ < 4)
            numla_fuzz_file_made_[numla_fuzz_file_nmade_++] = f;
    }
    return f->dir;
}

/* path (room for n) becomes f's directory / name. */
static void numla_fuzz_file_path(numla_fuzz_file *f, const char *name, char *path, size_t n)
{
    snprintf(path, n, "%s/%s", numla_fuzz_file_dir(f), name);
}

/* data written as f's directory / name, whose path goes into path (room for n). Unlinked, then
 * created: ext4 turns truncating a freshly written file into a forced writeback
 * (auto_da_alloc), which made each iteration wait ~12 ms on a busy disk. */
static void numla_fuzz_file_write(numla_fuzz_file *f, const char *name, const uint8_t *data,
                                  size_t size, char *path, size_t n)
{
    numla_fuzz_file_path(f, name, path, n);
    unlink(path);
    FILE *fp = fopen(path, "wb");
    if (!fp || fwrite(data, 1, size, fp) != size || fclose(fp) != 0)
        numla_fuzz_file_die_(f, "cannot write the input file", path);
}

#endif
