// expect_error(f, text): f must throw tessera::Error whose message contains text.
#pragma once

#include <string>

#include <gtest/gtest.h>

#include "tessera/error.h"

namespace tessera::test {

template<typename F>
void expect_error(F f, const std::string &text) {
    try {
        f();
        ADD_FAILURE() << "expected an error containing: " << text;
    } catch (const Error &e) {
        EXPECT_NE(std::string(e.what()).find(text), std::string::npos) << e.what();
    }
}

}  // namespace tessera::test
