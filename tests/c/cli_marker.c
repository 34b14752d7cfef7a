/* A do-nothing shared library for `rocmguard run`'s tests: preloaded by the caller, it must still
 * be in LD_PRELOAD (and mapped) after the launcher prepends librocmguard.so. */
int rocmguard_test_marker = 1;
