// Tests for the conv family: written with the family.
#include "test_util.h"
