// expect_error(f, text): f must throw tessera::Error whose message contains
// text; expect_error(f, {a, b, ...}): contains every one of them.
// error_of(f): the message of the E (tessera::Error unless given) that f throws,
// or "<no error>" when it throws none, for tests that compare whole messages.
#pragma once

#include <string>
#include <initializer_list>
#include <vector>

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

template<typename F>
void expect_error(F f, const std::vector<std::string> &parts) {
    try {
        f();
        ADD_FAILURE() << "expected tessera::Error containing '" << parts.at(0) << "'";
    } catch (const Error &e) {
        const std::string msg = e.what();
        for (const std::string &p : parts)
            EXPECT_NE(msg.find(p), std::string::npos) << "'" << p << "' not in: " << msg;
    }
}

// A braced list of parts picks this one (not the single text's).
template<typename F>
void expect_error(F f, std::initializer_list<std::string> parts) {
    expect_error(f, std::vector<std::string>(parts));
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
