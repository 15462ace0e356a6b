/* harness/files/test_tmpdir.h — for tests only: directories under /tmp that a
 * test makes and its .fini removes with everything in them.  Criterion runs a
 * test's (and its suite's) .fini after a failed assertion too, so a test that
 * stops half-way leaves nothing behind; it does not after a crash, a timeout
 * or cr_skip_test (call ac_test_tmpdirs_remove before skipping). */
#ifndef ATTNCHECK_TEST_TMPDIR_H
#define ATTNCHECK_TEST_TMPDIR_H

/* Makes /tmp/PREFIX-XXXXXX (the test fails when it cannot) and returns its
 * path, valid until ac_test_tmpdirs_remove. */
char *ac_test_tmpdir(const char *prefix);
/* Removes every directory ac_test_tmpdir made in this process, and what it
 * holds; nothing when there is none.  Fit for .init and .fini. */
void ac_test_tmpdirs_remove(void);

#endif
