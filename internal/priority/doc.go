// Package priority sets the CPU scheduling priority (nice value) of the whole calling process.
//
// Linux keeps a nice value per thread, and setpriority(PRIO_PROCESS, pid) changes only the
// thread whose id is pid: a Go program's other threads, made by the runtime before main ran,
// would keep theirs. SetNice changes every thread listed in /proc/self/task; threads and child
// processes started afterwards inherit the value from the thread that makes them.
package priority
