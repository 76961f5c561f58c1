/* mapped_file.c - mmap of model files, and whole-file reads of small ones. */
#include "common/mapped_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

ds_status ds_mapped_file_open(ds_mapped_file *mf, const char *path, ds_err *e) {
    mf->data = NULL;
    mf->size = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ds_fail(e, DS_EIO, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int err = errno;
        close(fd);
        return ds_fail(e, DS_EIO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ds_fail(e, DS_EIO, "%s: not a regular file", path);
    }
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int err = errno;
            close(fd);
            return ds_fail(e, DS_EIO, "%s: cannot mmap %lld bytes: %s", path, (long long)st.st_size,
                           strerror(err));
        }
        mf->data = p;
        mf->size = (size_t)st.st_size;
    }
    close(fd);
    return DS_OK;
}

void ds_mapped_file_close(ds_mapped_file *mf) {
    if (mf->data) munmap((void *)mf->data, mf->size);
    mf->data = NULL;
    mf->size = 0;
}

ds_status ds_read_text_file(const char *path, size_t max_bytes, char **out, size_t *len, ds_err *e) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return ds_fail(e, errno == ENOENT ? DS_ENOTFOUND : DS_EIO, "%s: cannot open: %s", path, strerror(errno));
    if (fseek(f, 0, SEEK_END) != 0) {
        fclose(f);
        return ds_fail(e, DS_EIO, "%s: cannot seek", path);
    }
    long n = ftell(f);
    if (n < 0 || (size_t)n > max_bytes) {
        fclose(f);
        return ds_fail(e, DS_ECORRUPT, "%s: size %ld is over the limit of %zu bytes", path, n, max_bytes);
    }
    rewind(f);
    char *buf = malloc((size_t)n + 1);
    if (!buf) {
        fclose(f);
        return ds_fail(e, DS_ENOMEM, "%s: cannot allocate %ld bytes", path, n);
    }
    size_t got = fread(buf, 1, (size_t)n, f);
    fclose(f);
    if (got != (size_t)n) {
        free(buf);
        return ds_fail(e, DS_EIO, "%s: short read (%zu of %ld bytes)", path, got, n);
    }
    buf[n] = '\0';
    *out = buf;
    if (len) *len = (size_t)n;
    return DS_OK;
}
