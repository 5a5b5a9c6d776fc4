/* nnc_tensor_write / nnc_tensor_read: a tensor written from C reads back from C, into a new
 * handle and into an existing tensor; a mismatched tensor, a missing name, a database that
 * cannot be opened and NULL arguments are refused with their codes and a message.
 * Usage: tensor_io DB_PATH (the test then reads DB_PATH from Python, decoding NNC's row by
 * hand). Prints one line per check; exit status 0 when all hold. */
#include <stdio.h>
#include <string.h>

#include "nnc.h"
#include "expect.h"

#define CHECK(cond)                                                   \
    do {                                                              \
        checks++;                                                     \
        if (!(cond)) failures++;                                      \
        printf("%s %s\n", (cond) ? "ok  " : "FAIL", #cond);          \
    } while (0)

int main(int argc, char** argv) {
    float x[2 * 3 * 4], y[2 * 3 * 4], z[5];
    int64_t dims[3] = {2, 3, 4}, five = 5;
    nnc_tensor_h tx = NULL, ty = NULL, tz = NULL, fresh = NULL;
    nnc_tensor_t view;
    int i;
    if (argc != 2) {
        fprintf(stderr, "usage: %s DB_PATH\n", argv[0]);
        return 2;
    }
    if (nnc_init() != NNC_SUCCESS) {
        fprintf(stderr, "nnc_init: %s\n", nnc_error_message());
        return 1;
    }
    for (i = 0; i < 24; i++) x[i] = (float)i * 0.5f - 3.0f, y[i] = 0;
    EXPECT(nnc_tensor_new(&tx, x, NNC_32F, 3, dims), NNC_SUCCESS);
    EXPECT(nnc_tensor_new(&ty, y, NNC_32F, 3, dims), NNC_SUCCESS);
    EXPECT(nnc_tensor_new(&tz, z, NNC_32F, 1, &five), NNC_SUCCESS);
    EXPECT(nnc_tensor_write(tx, argv[1], "x"), NNC_SUCCESS);
    EXPECT(nnc_tensor_write(tx, argv[1], "x"), NNC_SUCCESS);       /* REPLACE INTO */

    /* Into a new tensor (*tensor NULL), and into an existing one. */
    EXPECT(nnc_tensor_read(argv[1], "x", &fresh), NNC_SUCCESS);
    EXPECT(nnc_tensor_get(fresh, &view), NNC_SUCCESS);
    CHECK(view.ndim == 3 && view.dim[0] == 2 && view.dim[1] == 3 && view.dim[2] == 4);
    CHECK(view.datatype == NNC_32F && memcmp(view.data, x, sizeof(x)) == 0);
    EXPECT(nnc_tensor_read(argv[1], "x", &ty), NNC_SUCCESS);
    CHECK(memcmp(x, y, sizeof(x)) == 0);

    /* Refused: another shape (never a truncated copy), a missing name, no database, NULLs. */
    EXPECT(nnc_tensor_read(argv[1], "x", &tz), NNC_ERROR_TENSOR);
    EXPECT(nnc_tensor_read(argv[1], "no such tensor", &ty), NNC_ERROR_IO);
    EXPECT(nnc_tensor_read("/nonexistent-dir/db.sqlite3", "x", &ty), NNC_ERROR_IO);
    EXPECT(nnc_tensor_write(tx, "/nonexistent-dir/db.sqlite3", "x"), NNC_ERROR_IO);
    EXPECT(nnc_tensor_write(tx, NULL, "x"), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_write(tx, argv[1], NULL), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_write(NULL, argv[1], "x"), NNC_ERROR_NULL);
    EXPECT(nnc_tensor_read(argv[1], "x", NULL), NNC_ERROR_NULL);

    EXPECT(nnc_tensor_free(fresh), NNC_SUCCESS);
    EXPECT(nnc_tensor_free(tx), NNC_SUCCESS);
    EXPECT(nnc_tensor_free(ty), NNC_SUCCESS);
    EXPECT(nnc_tensor_free(tz), NNC_SUCCESS);
    EXPECT(nnc_finalize(), NNC_SUCCESS);
    printf("%d checks, %d failed\n", checks, failures);
    return failures != 0;
}
