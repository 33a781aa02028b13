/* gml_get_first_tensor / gml_get_next_tensor visit every tensor of a
 * context once, in creation order, in allocating and no_alloc contexts. */
#include <ggmlite/ggmlite.h>

#include <stdio.h>
#include <string.h>

static int check(bool no_alloc) {
    gml_context *ctx = gml_init((gml_init_params){.mem_size = 1 << 16, .no_alloc = no_alloc});
    if (gml_get_first_tensor(ctx) != NULL) {
        fprintf(stderr, "FAIL: an empty context has a first tensor\n");
        return 1;
    }
    gml_tensor *made[5];
    made[0] = gml_set_name(gml_new_tensor_2d(ctx, GML_F32, 3, 4), "a");
    made[1] = gml_set_name(gml_new_tensor_1d(ctx, GML_I32, 7), "b");
    made[2] = gml_transpose(ctx, made[0], 0, 1);          /* a view counts too */
    made[3] = gml_matmul(ctx, made[2], made[0]);           /* [4,3] @ [3,4] */
    made[4] = gml_set_name(gml_new_tensor_3d(ctx, GML_F32, 1, 2, 3), "c");
    int n = 0;
    for (gml_tensor *t = gml_get_first_tensor(ctx); t; t = gml_get_next_tensor(ctx, t), n++) {
        if (n >= 5 || t != made[n]) {
            fprintf(stderr, "FAIL (no_alloc=%d): tensor %d is '%s', expected '%s'\n", no_alloc, n,
                    t->name, n < 5 ? made[n]->name : "(end)");
            return 1;
        }
    }
    if (n != 5) {
        fprintf(stderr, "FAIL (no_alloc=%d): visited %d tensors, made 5\n", no_alloc, n);
        return 1;
    }
    gml_free(ctx);
    return 0;
}

int main(void) {
    int fails = check(false) + check(true);
    if (!fails) printf("tensor iteration: ok\n");
    return fails ? 1 : 0;
}
