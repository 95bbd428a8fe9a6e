/* What this process holds, from /proc: see proc_res.h. */
#include "proc_res.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

int proc_dir_entries(const char *path)
{
    DIR *dir = opendir(path);
    struct dirent *e;
    int n = 0;

    if (dir == NULL)
        return -1;
    while ((e = readdir(dir)) != NULL)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(dir);
    return n;
}

int proc_thread_count(void)
{
    return proc_dir_entries("/proc/self/task");
}

/* Port of an IPv4 or IPv6 address; 0 for any other family. */
static unsigned sock_port(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return ntohs(((const struct sockaddr_in *)ss)->sin_port);
    if (ss->ss_family == AF_INET6)
        return ntohs(((const struct sockaddr_in6 *)ss)->sin6_port);
    return 0;
}

/*
 * Whether descriptor fd is a TCP socket, and its ports and state. The
 * socket is this process's own, so it is asked directly rather than looked
 * up in /proc/net/tcp, which a busy machine rewrites while it is read.
 */
static int tcp_socket_of(int fd, proc_tcp_sock_t *s)
{
    struct sockaddr_storage ss;
    struct tcp_info info;
    struct stat st;
    socklen_t len = sizeof(int);
    int proto = 0;

    if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode) ||
        getsockopt(fd, SOL_SOCKET, SO_PROTOCOL, &proto, &len) != 0 || proto != IPPROTO_TCP)
        return 0;
    memset(s, 0, sizeof(*s));
    len = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &len) == 0)
        s->local_port = sock_port(&ss);
    len = sizeof(ss);
    if (getpeername(fd, (struct sockaddr *)&ss, &len) == 0)
        s->remote_port = sock_port(&ss);
    len = sizeof(info);
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) == 0)
        s->state = info.tcpi_state;
    return 1;
}

int proc_tcp_sockets(proc_tcp_sock_t *out, int max)
{
    DIR *dir = opendir("/proc/self/fd");
    struct dirent *e;
    int found = 0;

    if (dir == NULL)
        return -1;
    while ((e = readdir(dir)) != NULL) {
        proc_tcp_sock_t s;
        char *end;
        long fd = strtol(e->d_name, &end, 10);

        if (e->d_name[0] == '.' || *end != '\0' || fd == dirfd(dir) ||
            !tcp_socket_of((int)fd, &s))
            continue;
        if (found < max)
            out[found] = s;
        found++;
    }
    closedir(dir);
    return found;
}

long proc_vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL && kib < 0)
        if (sscanf(line, "VmHWM: %ld kB", &kib) != 1)
            kib = -1;
    fclose(f);
    return kib;
}

int proc_mappings_named(const char *name)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    int n = 0;

    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL)
        n += strstr(line, name) != NULL;
    fclose(f);
    return n;
}
