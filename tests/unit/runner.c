/* tests/unit/runner.c — the one CUnit runner. Suites register themselves (test_util.h). */
#include "test_util.h"

#include <CUnit/Basic.h>
#include <stdio.h>
#include <string.h>

enum { NUMLA_TEST_MAX_SUITES = 256 };

typedef struct numla_test_suite_entry {
    const char *name;
    int (*init)(void);
    int (*cleanup)(void);
    const numla_test_case *cases;
    int num_cases;
} numla_test_suite_entry;

static numla_test_suite_entry numla_suites_[NUMLA_TEST_MAX_SUITES];
static int numla_num_suites_;

void numla_test_register(const char *suite, int (*init)(void), int (*cleanup)(void),
                         const numla_test_case *cases, int num_cases)
{
    if (numla_num_suites_ < NUMLA_TEST_MAX_SUITES)
        numla_suites_[numla_num_suites_++] =
            (numla_test_suite_entry){suite, init, cleanup, cases, num_cases};
}

int main(int argc, char **argv)
{
    const char *only = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--suite") && i + 1 < argc) {
            only = argv[++i];
        } else if (!strcmp(argv[i], "--list")) {
            for (int s = 0; s < numla_num_suites_; s++)
                printf("%s (%d tests)\n", numla_suites_[s].name, numla_suites_[s].num_cases);
            return 0;
        } else {
            fprintf(stderr, "usage: numla_unit [--suite NAME] [--list]\n");
            return 2;
        }
    }
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 1;
    int added = 0;
    for (int s = 0; s < numla_num_suites_; s++) {
        const numla_test_suite_entry *e = &numla_suites_[s];
        if (only && strcmp(only, e->name))
            continue;
        CU_pSuite suite = CU_add_suite(e->name, e->init, e->cleanup);
        for (int c = 0; c < e->num_cases; c++)
            CU_add_test(suite, e->cases[c].name, e->cases[c].fn);
        added++;
    }
    if (!added) {
        fprintf(stderr, "numla_unit: no suite named '%s'\n", only ? only : "(any)");
        CU_cleanup_registry();
        return 1;
    }
    CU_basic_set_mode(CU_BRM_VERBOSE);
    CU_basic_run_tests();
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_suites_failed();
    unsigned run = CU_get_number_of_tests_run();
    CU_cleanup_registry();
    if (run == 0) {
        fprintf(stderr, "numla_unit: no test ran\n");
        return 1;
    }
    return failed > 255 ? 255 : (int)failed;
}
