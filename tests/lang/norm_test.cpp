// Tests for the norm family: written with the family.
#include "test_util.h"
