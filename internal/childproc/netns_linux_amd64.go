package childproc

// sysSetns is setns(2) on amd64, which package syscall does not name.
const sysSetns = 308
