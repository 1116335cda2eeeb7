/* Tests for the serving options run and serve share (engine/cli/engine_opts.c): --linear-act,
 * which reaches the weight loader as numla_weights_options.linear_act and .qblock_q8_act. */
#include "test_util.h"

#include "engine/cli/engine_opts.h"

static void test_linear_act(void)
{
    numla_cli_engine_opts o;
    numla_cli_engine_opts_default(&o);
    CU_ASSERT_EQUAL(o.weights.linear_act, NUMLA_LINEAR_ACT_F32);
    CU_ASSERT_EQUAL(numla_cli_engine_opts_parse("t", &o, "--linear-act", "bf16"), NUMLA_CLI_OPT_VALUE);
    CU_ASSERT_EQUAL(o.weights.linear_act, NUMLA_LINEAR_ACT_BF16);
    CU_ASSERT_EQUAL(o.weights.qblock_q8_act, 0);
    CU_ASSERT_EQUAL(numla_cli_engine_opts_parse("t", &o, "--linear-act", "q8"), NUMLA_CLI_OPT_VALUE);
    CU_ASSERT_EQUAL(o.weights.linear_act, NUMLA_LINEAR_ACT_F32);
    CU_ASSERT_EQUAL(o.weights.qblock_q8_act, 1);
    CU_ASSERT_EQUAL(numla_cli_engine_opts_parse("t", &o, "--linear-act", "f32"), NUMLA_CLI_OPT_VALUE);
    CU_ASSERT_EQUAL(o.weights.linear_act, NUMLA_LINEAR_ACT_F32);
    CU_ASSERT_EQUAL(o.weights.qblock_q8_act, 0);
    /* a misspelt or missing value is refused, not taken as the default */
    CU_ASSERT_EQUAL(numla_cli_engine_opts_parse("t", &o, "--linear-act", "fp16"), NUMLA_CLI_OPT_BAD);
    CU_ASSERT_EQUAL(numla_cli_engine_opts_parse("t", &o, "--linear-act", NULL), NUMLA_CLI_OPT_BAD);
    CU_ASSERT_EQUAL(o.weights.linear_act, NUMLA_LINEAR_ACT_F32);
    CU_ASSERT_EQUAL(o.weights.qblock_q8_act, 0);
}

NUMLA_TEST_SUITE(engine_opts, NULL, NULL, NUMLA_TEST(test_linear_act))
