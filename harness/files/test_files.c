/* harness/files/test_files.c — whole-file reads and atomic writes against
 * hostile paths (suite harness_files): symlinks written through, devices and
 * FIFOs refused and left alone, modes kept, reads bounded. */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "harness/files/test_files_support.h"
#include "harness/harness.h"

TestSuite(harness_files, .init = make_dir, .fini = remove_dir);

static void put(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "%s", path);
    fputs(text, f);
    fclose(f);
    cr_assert_eq(chmod(path, mode), 0);
}

static char *get(const char *path)
{
    char *data;
    size_t len;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(path, &data, &len, &err), AC_OK, "%s", err.msg);
    cr_assert_not_null(data, "%s missing", path);
    cr_assert_eq(strlen(data), len, "NUL-terminated at its length");
    return data;
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    cr_assert_eq(stat(path, &st), 0, "%s", path);
    return st.st_mode & 07777;
}

static bool is_link(const char *path)
{
    struct stat st;
    return lstat(path, &st) == 0 && S_ISLNK(st.st_mode);
}

Test(harness_files, a_symlink_is_written_through_and_stays_a_link)
{
    put(path_of("target.json"), "old", 0600);
    cr_assert_eq(symlink("target.json", path_of("link1")), 0); /* relative, and a chain of two */
    cr_assert_eq(symlink(path_of("link1"), path_of("link2")), 0);
    ac_err err = {{0}};
    cr_assert_eq(ac_write_atomic(path_of("link2"), "new", 3, &err), AC_OK, "%s", err.msg);
    cr_assert(is_link(path_of("link1")) && is_link(path_of("link2")), "the links are still links");
    char *text = get(path_of("target.json"));
    cr_assert_str_eq(text, "new");
    free(text);
    cr_assert_eq(mode_of(path_of("target.json")), 0600, "the target keeps its mode");
    /* a dangling link: its target is created, the link kept */
    cr_assert_eq(symlink("fresh.json", path_of("dangling")), 0);
    cr_assert_eq(ac_write_atomic(path_of("dangling"), "x", 1, &err), AC_OK, "%s", err.msg);
    cr_assert(is_link(path_of("dangling")));
    text = get(path_of("fresh.json"));
    cr_assert_str_eq(text, "x");
    free(text);
}

Test(harness_files, an_existing_file_keeps_its_mode_and_a_new_one_follows_the_umask)
{
    put(path_of("r.md"), "old", 0640);
    ac_err err = {{0}};
    cr_assert_eq(ac_write_atomic(path_of("r.md"), "n", 1, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(mode_of(path_of("r.md")), 0640);
    put(path_of("x.md"), "old", 0755);
    cr_assert_eq(ac_write_atomic(path_of("x.md"), "n", 1, &err), AC_OK, "%s", err.msg);
    cr_assert_eq(mode_of(path_of("x.md")), 0755);
    mode_t old = umask(027);
    cr_assert_eq(ac_write_atomic(path_of("new1.md"), "n", 1, &err), AC_OK, "%s", err.msg);
    umask(022);
    cr_assert_eq(ac_write_atomic(path_of("new2.md"), "n", 1, &err), AC_OK, "%s", err.msg);
    umask(old);
    cr_assert_eq(mode_of(path_of("new1.md")), 0640, "0666 less umask 027");
    cr_assert_eq(mode_of(path_of("new2.md")), 0644, "0666 less umask 022");
}

/* Devices, FIFOs and folders are refused, and stay what they were: the old
 * rename replaced a symlink to /dev/full (or /dev/full itself, as root) by a
 * regular file. */
Test(harness_files, non_regular_targets_are_refused_and_left_alone, .timeout = 10)
{
    cr_assert_eq(mkfifo(path_of("fifo"), 0600), 0);
    cr_assert_eq(symlink("/dev/full", path_of("full")), 0);
    cr_assert_eq(symlink("/dev/null", path_of("null")), 0);
    cr_assert_eq(mkdir(path_of("sub"), 0755), 0);
    const char *paths[] = {path_of("fifo"), path_of("full"), path_of("null"), path_of("sub")};
    const char *kinds[] = {"is a FIFO", "/dev/full: is a character device", "is a character device", "is a directory"};
    for (int i = 0; i < 4; i++) {
        ac_err err = {{0}};
        cr_assert_eq(ac_write_atomic(paths[i], "x", 1, &err), AC_ERR_INPUT, "%s", paths[i]);
        cr_assert_not_null(strstr(err.msg, kinds[i]), "'%s' lacks '%s'", err.msg, kinds[i]);
        cr_assert_eq(ac_check_writable(paths[i], "--json", &err), AC_ERR_INPUT, "%s", paths[i]);
        cr_assert_not_null(strstr(err.msg, "--json"), "%s", err.msg);
    }
    struct stat st;
    cr_assert(lstat(path_of("fifo"), &st) == 0 && S_ISFIFO(st.st_mode));
    cr_assert(is_link(path_of("full")) && is_link(path_of("null")));
    cr_assert(stat("/dev/full", &st) == 0 && S_ISCHR(st.st_mode));
    cr_assert(lstat(path_of("sub"), &st) == 0 && S_ISDIR(st.st_mode));
}

Test(harness_files, unwritable_places_are_input_errors_and_the_check_touches_nothing)
{
    ac_err err = {{0}};
    cr_assert_eq(ac_write_atomic(path_of("no/such/dir/r.json"), "x", 1, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "cannot create a file in"), "%s", err.msg);
    cr_assert_eq(ac_check_writable(path_of("no/such/r.json"), "--junit", &err), AC_ERR_INPUT);
    cr_assert_eq(ac_check_writable(path_of("sub/"), "--junit", &err), AC_ERR_INPUT);
    cr_assert_eq(symlink("loop2", path_of("loop1")), 0);
    cr_assert_eq(symlink("loop1", path_of("loop2")), 0);
    cr_assert_eq(ac_write_atomic(path_of("loop1"), "x", 1, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "symbolic links"), "%s", err.msg);
    /* the check of a writable path leaves an existing file as it was, and nothing beside it */
    put(path_of("keep.json"), "precious", 0600);
    cr_assert_eq(ac_check_writable(path_of("keep.json"), "--json", &err), AC_OK, "%s", err.msg);
    char *text = get(path_of("keep.json"));
    cr_assert_str_eq(text, "precious");
    free(text);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "test $(ls -A '%s' | wc -l) -eq 3", dir); /* keep.json, loop1, loop2 */
    cr_assert_eq(system(cmd), 0, "a temp file was left behind");
}

Test(harness_files, reads_are_bounded_and_refuse_devices_and_fifos, .timeout = 10)
{
    char *data = (char *)1;
    size_t len = 7;
    ac_err err = {{0}};
    cr_assert_eq(ac_read_file(path_of("missing"), &data, &len, &err), AC_OK);
    cr_assert(data == NULL && len == 0);
    cr_assert_eq(ac_read_file_max("/dev/zero", 1 << 20, &data, &len, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "character device"), "%s", err.msg);
    cr_assert_eq(mkfifo(path_of("fifo"), 0600), 0);
    cr_assert_eq(ac_read_file(path_of("fifo"), &data, &len, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "is a FIFO"), "%s", err.msg);
    cr_assert_eq(ac_read_file(dir, &data, &len, &err), AC_ERR_INPUT);
    put(path_of("ten"), "0123456789", 0644);
    cr_assert_eq(ac_read_file_max(path_of("ten"), 9, &data, &len, &err), AC_ERR_INPUT);
    cr_assert_not_null(strstr(err.msg, "larger than 9 bytes"), "%s", err.msg);
    cr_assert_eq(ac_read_file_max(path_of("ten"), 10, &data, &len, &err), AC_OK, "%s", err.msg);
    cr_assert(len == 10 && data[10] == '\0' && !memcmp(data, "0123456789", 10));
    free(data);
    /* a file that says size 0 and holds more (procfs) is read to its end */
    cr_assert_eq(ac_read_file_max("/proc/self/status", 1 << 20, &data, &len, &err), AC_OK, "%s", err.msg);
    cr_assert(len > 0 && strstr(data, "Pid:") != NULL);
    free(data);
}

Test(harness_files, a_tree_is_removed_without_following_its_links)
{
    char sub[256], deep[256], outside[256], link[256];
    snprintf(sub, sizeof sub, "%s", path_of("tree"));
    snprintf(deep, sizeof deep, "%.200s/a/b", sub);
    snprintf(outside, sizeof outside, "%s", path_of("kept.txt"));
    cr_assert_eq(mkdir(sub, 0700), 0);
    cr_assert_eq(mkdir(path_of("tree/a"), 0700), 0);
    cr_assert_eq(mkdir(deep, 0700), 0);
    put(path_of("tree/a/b/file.txt"), "inside", 0600);
    put(outside, "outside", 0600);
    snprintf(link, sizeof link, "%.200s/a/to-outside", sub);
    cr_assert_eq(symlink(outside, link), 0);
    cr_assert_eq(symlink("..", path_of("tree/a/b/up")), 0, "a link to a directory above must not be walked");
    cr_assert_eq(ac_remove_tree(sub), 0);
    struct stat st;
    cr_assert_neq(lstat(sub, &st), 0, "the tree is gone");
    char *kept = get(outside);
    cr_assert_str_eq(kept, "outside", "a link's target is left alone");
    free(kept);
    cr_assert_eq(ac_remove_tree(sub), 0, "a missing path is no error");
}
