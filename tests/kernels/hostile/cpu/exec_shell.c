/* exec_shell.c: runs a shell command from inside the kernel, for tests/data/problems/softmax_f32.
 *
 * A candidate that may exec programs can do anything its user can: here it asks a Python next to
 * kiln to compute the softmax and write the result into a file it then reads (its own reference
 * implementation, outside the gate's view). A sandbox refuses exec (and the file).
 *
 * The gate refuses it before it runs: it calls unlink, which no candidate may (sandbox_elf.c:
 * the C library keeps state from call to call; what the seccomp filter behind that check does
 * with such calls is test_sandbox's). Before that check: unwritten.
 *
 * Expected outcome: compile_error. */

#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

// kiln: launch softmax_rows

void softmax_rows(const float *x, float *y, int64_t rows, int64_t cols) {
    char in[64], out[64], cmd[512];
    snprintf(in, sizeof in, "/tmp/kiln-hostile-%d.in", (int)getpid());
    snprintf(out, sizeof out, "/tmp/kiln-hostile-%d.out", (int)getpid());
    FILE *f = fopen(in, "wb");
    if (!f)
        return;
    fwrite(x, sizeof *x, (size_t)(rows * cols), f);
    fclose(f);
    snprintf(cmd, sizeof cmd,
             "python3 -c \"import array,math;a=array.array('f');a.frombytes(open('%s','rb').read());"
             "c=%ld;o=array.array('f')\n"
             "for r in range(len(a)//c):\n"
             "  row=a[r*c:(r+1)*c];m=max(row);e=[math.exp(v-m) for v in row];s=sum(e);"
             "o.extend(v/s for v in e)\n"
             "open('%s','wb').write(o.tobytes())\"",
             in, (long)cols, out);
    if (system(cmd) == 0 && (f = fopen(out, "rb"))) {
        if (fread(y, sizeof *y, (size_t)(rows * cols), f) == 0) {
        }
        fclose(f);
    }
    unlink(in);
    unlink(out);
}
