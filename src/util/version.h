/* version.h: the kiln release, written here once: the kiln binary (--version), libkiln_rt (the
 * release whose libraries it accepts) and the store's meta use it; python/kiln/__init__.py's
 * __version__ must equal it (tests/py/test_build.py holds them together). */
#ifndef KILN_VERSION_H
#define KILN_VERSION_H

#define KILN_VERSION "0.1.0"

#endif
