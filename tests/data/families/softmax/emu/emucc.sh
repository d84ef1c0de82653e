#!/bin/sh
# emucc.sh: the compiler (KILN_CC) for emulated CUDA candidates on the cpu backend: the candidate
# as C++17 (it includes emu_rt.h), the backend's trampoline as C, linked into one shared object.
# Takes the cpu backend's command line (flags, -I DIR, -include HEADER, -o OUT, SOURCES) and keeps
# what it needs.
out=; inc=; idir=; cand=; tramp=
while [ $# -gt 0 ]; do
    case "$1" in
    -o) out=$2; shift ;;
    -include) inc=$2; shift ;;
    -I) idir=$2; shift ;;
    *.c) if [ -z "$cand" ]; then cand=$1; else tramp=$1; fi ;;
    esac
    shift
done
${CXX:-g++} -std=c++17 -O1 -fPIC -w -x c++ -include "$inc" -I"$idir" -c "$cand" -o "$out.cand.o" &&
    ${CC:-cc} -std=gnu11 -O1 -fPIC -include "$inc" -I"$idir" -c "$tramp" -o "$out.tramp.o" &&
    ${CXX:-g++} -shared -fPIC -o "$out" "$out.cand.o" "$out.tramp.o" -lm
status=$?
rm -f "$out.cand.o" "$out.tramp.o"
exit $status
