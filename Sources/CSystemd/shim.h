#ifndef NOTIFYD_CSYSTEMD_SHIM_H
#define NOTIFYD_CSYSTEMD_SHIM_H
// The journal header turns sd_journal_sendv() into a macro that adds the C caller's CODE_FILE/CODE_LINE; Swift
// cannot use function-like macros and passes its own CODE_* fields, so ask for the plain functions.
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <systemd/sd-daemon.h>
#include <systemd/sd-journal.h>
#include <systemd/sd-bus.h>
#include <systemd/sd-login.h>
#endif
