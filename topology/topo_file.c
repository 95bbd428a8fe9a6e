/*
 * Topology files: hwloc XML, with what hwloc does not describe (NVLink) as
 * info attributes of the GPUs' PCI objects, so one file carries a whole
 * node. Files come from lstopo --of xml, from CHORUS_TOPO_DUMP_FILE, or are
 * written by hand for machines we do not have.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "topology/topo_internal.h"
#include "util/log.h"

int topo_file_nvlink_parse(const char *value, char busid[TOPO_BUSID_MAX], int *links_p)
{
    unsigned domain, bus, dev, func;
    int links, end = 0;

    if (sscanf(value, "%x:%x:%x.%x %d%n", &domain, &bus, &dev, &func, &links, &end) != 5 ||
        value[end] != '\0' || links < 1 || links > TOPO_NVLINK_MAX || domain > 0xffff ||
        bus > 0xff || dev > 0x1f || func > 7)
        return -1;
    snprintf(busid, TOPO_BUSID_MAX, "%04x:%02x:%02x.%01x", domain, bus, dev, func);
    *links_p = links;
    return 0;
}

void topo_file_nvlink_format(char *out, size_t len, const char *busid, int links)
{
    snprintf(out, len, "%s %d", busid, links);
}

static chorus_status_t read_all(int fd, const char *path, char *buf, size_t len)
{
    size_t done = 0;

    while (done < len) {
        ssize_t n = read(fd, buf + done, len - done);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            chorus_error("cannot read %s: %m", path);
            return CHORUS_ERR_SYSTEM;
        }
        if (n == 0) {
            chorus_error("%s shrank while read (%zu of %zu bytes)", path, done, len);
            return CHORUS_ERR_INVALID_ARG;
        }
        done += (size_t)n;
    }
    buf[len] = '\0';
    return CHORUS_OK;
}

/* The whole file, NUL-terminated; bounded so a wrong path cannot exhaust memory. */
static chorus_status_t read_file(const char *path, char **buf_p, size_t *len_p)
{
    struct stat sb;
    chorus_status_t st;
    char *buf;
    int fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0) {
        chorus_error("cannot open topology file %s: %m", path);
        return CHORUS_ERR_SYSTEM;
    }
    if (fstat(fd, &sb) != 0) {
        chorus_error("cannot stat %s: %m", path);
        st = CHORUS_ERR_SYSTEM;
        goto err_close;
    }
    if (!S_ISREG(sb.st_mode) || sb.st_size <= 0 || (size_t)sb.st_size > TOPO_FILE_MAX) {
        chorus_error("%s is not a regular file of 1 to %u bytes (size %lld)", path,
                     TOPO_FILE_MAX, (long long)sb.st_size);
        st = CHORUS_ERR_INVALID_ARG;
        goto err_close;
    }
    buf = malloc((size_t)sb.st_size + 1);
    if (buf == NULL) {
        chorus_error("no memory for %s (%lld bytes)", path, (long long)sb.st_size);
        st = CHORUS_ERR_NO_MEMORY;
        goto err_close;
    }
    st = read_all(fd, path, buf, (size_t)sb.st_size);
    if (st != CHORUS_OK) {
        free(buf);
        goto err_close;
    }
    close(fd);
    *buf_p = buf;
    *len_p = (size_t)sb.st_size;
    return CHORUS_OK;
err_close:
    close(fd);
    return st;
}

chorus_status_t topo_node_load(const char *path, topo_node_t **node_p)
{
    chorus_status_t st;
    size_t len;
    char *buf;

    if (path == NULL || path[0] == '\0') {
        chorus_error("no topology file named");
        return CHORUS_ERR_INVALID_ARG;
    }
    st = read_file(path, &buf, &len);
    if (st != CHORUS_OK)
        return st;
    st = topo_node_from_xml(buf, len, path, node_p);
    free(buf);
    if (st == CHORUS_OK)
        chorus_debug("loaded %s (%zu bytes)", path, len);
    return st;
}

chorus_status_t topo_node_dump(const topo_node_t *node, const char *path)
{
    FILE *f;

    if (node == NULL || node->xml == NULL || path == NULL || path[0] == '\0') {
        chorus_error("dump needs a map built from hwloc and a file name");
        return CHORUS_ERR_INVALID_ARG;
    }
    f = fopen(path, "we");
    if (f == NULL) {
        chorus_error("cannot create %s: %m", path);
        return CHORUS_ERR_SYSTEM;
    }
    if (fwrite(node->xml, 1, node->xml_len, f) != node->xml_len) {
        chorus_error("cannot write %zu bytes to %s: %m", node->xml_len, path);
        fclose(f);
        return CHORUS_ERR_SYSTEM;
    }
    if (fclose(f) != 0) {
        chorus_error("cannot write %s: %m", path);
        return CHORUS_ERR_SYSTEM;
    }
    return CHORUS_OK;
}
