#include "cli_exit.h"

#include <iostream>
#include <new>

#include "tessera/error.h"

namespace tessera {

int exit_code_of(const char *program, const std::function<void()> &body) {
    try {
        body();
        return 0;
    } catch (const UsageError &e) {
        std::cerr << program << ": " << e.message << "\nRun with --help for more information.\n";
        return 2;
    } catch (const Error &e) {
        std::cerr << program << ": error: " << e.what() << "\n";
        return 1;
    } catch (const InternalError &e) {
        std::cerr << program << ": internal error: " << e.what() << "\n";
        return 3;
    } catch (const std::bad_alloc &) {
        std::cerr << program << ": out of host memory\n";
        return 1;
    } catch (const std::exception &e) {
        std::cerr << program << ": internal error: " << e.what() << "\n";
        return 3;
    }
}

}  // namespace tessera
