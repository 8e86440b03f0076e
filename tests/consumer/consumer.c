/* SPDX-License-Identifier: MIT */
/* A downstream program: uses only the installed public header and library. */
#include <errno.h>
#include <procmesh.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    pm_address a;
    char buf[PM_ADDRESS_STRLEN];
    if (pm_address_parse("procmesh@worker:3#7", &a) != 0)
        return 1;
    if (pm_address_format(&a, buf, sizeof(buf)) < 0 || strcmp(buf, "procmesh@worker:3#7") != 0)
        return 1;
    if (pm_address_parse("bad", &a) != -EINVAL)
        return 1;
    printf("consumer: libprocmesh %s, %s, \"%s\"\n", pm_version_string(), buf, pm_strerror(-EINVAL));
    return 0;
}
