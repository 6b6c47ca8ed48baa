package childproc

// sysSetns is setns(2) on arm64, which package syscall does not name.
const sysSetns = 268
