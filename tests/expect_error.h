// expect_error(f, text): f must throw tessera::Error whose message contains text.
// error_of(f): the message of the E (tessera::Error unless given) that f throws,
// or "<no error>" when it throws none, for tests that compare whole messages.
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

template<typename E = Error, typename F>
std::string error_of(F &&f) {
    try {
        f();
    } catch (const E &e) {
        return e.what();
    }
    return "<no error>";
}

}  // namespace tessera::test
