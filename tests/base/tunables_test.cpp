// env_choice, env_list and env_int: an unknown or malformed value an error
// naming the variable and what it accepts.
#include <gtest/gtest.h>

#include "expect_error.h"
#include "scoped_env.h"
#include "tessera/tunables.h"

namespace tessera {
namespace {

TEST(Tunables, ChoiceDefaultsWhenUnsetAndRejectsUnknownValues) {
    {
        test::ScopedEnv env("TESSERA_TEST_CHOICE", nullptr);
        EXPECT_EQ(env_choice("TESSERA_TEST_CHOICE", {"a", "b"}, "a", "thing"), "a");
    }
    {
        test::ScopedEnv env("TESSERA_TEST_CHOICE", "b");
        EXPECT_EQ(env_choice("TESSERA_TEST_CHOICE", {"a", "b"}, "a", "thing"), "b");
    }
    test::ScopedEnv env("TESSERA_TEST_CHOICE", "c");
    EXPECT_EQ(test::error_of([] { env_choice("TESSERA_TEST_CHOICE", {"a", "b"}, "a", "thing"); }),
              "TESSERA_TEST_CHOICE: unknown thing 'c'; valid: a, b");
}

TEST(Tunables, IntIsNothingWhenUnsetAndRejectsWhatIsNotAnIntAtLeastItsMinimum) {
    {
        test::ScopedEnv env("TESSERA_TEST_INT", nullptr);
        EXPECT_FALSE(env_int("TESSERA_TEST_INT", 1, "fix it").has_value());
    }
    {
        test::ScopedEnv env("TESSERA_TEST_INT", "2147483647");
        EXPECT_EQ(env_int("TESSERA_TEST_INT", 1, "fix it"), 2147483647);
    }
    for (const char *bad : {"", "x", "7x", "0", "-1", "2147483648", "99999999999999999999"}) {
        test::ScopedEnv env("TESSERA_TEST_INT", bad);
        EXPECT_EQ(test::error_of([] { env_int("TESSERA_TEST_INT", 1, "fix it"); }),
                  std::string("environment variable TESSERA_TEST_INT='") + bad + "' is not an integer >= 1; fix it");
    }
}

TEST(Tunables, ListSkipsEmptyEntriesAndRejectsUnknownOnes) {
    const std::vector<std::string> valid = {"model", "graph", "all"};
    {
        test::ScopedEnv env("TESSERA_TEST_LIST", nullptr);
        EXPECT_TRUE(env_list("TESSERA_TEST_LIST", valid, "stage").empty());
    }
    {
        test::ScopedEnv env("TESSERA_TEST_LIST", "model,,graph,");
        EXPECT_EQ(env_list("TESSERA_TEST_LIST", valid, "stage"), (std::set<std::string>{"model", "graph"}));
    }
    test::ScopedEnv env("TESSERA_TEST_LIST", "model,grpah");
    EXPECT_EQ(test::error_of([&] { env_list("TESSERA_TEST_LIST", valid, "stage"); }),
              "TESSERA_TEST_LIST: unknown stage 'grpah'; valid: model, graph, all");
}

}  // namespace
}  // namespace tessera
