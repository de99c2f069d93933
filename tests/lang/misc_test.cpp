// Tests for the misc family: written with the family.
#include "test_util.h"
