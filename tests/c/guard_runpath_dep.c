/* The library guard_runpath finds only through its DT_RUNPATH / DT_RPATH ($ORIGIN/sub). */
int runpath_dep(void) { return 42; }
