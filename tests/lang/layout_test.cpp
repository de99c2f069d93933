// Tests for the layout family: written with the family.
#include "test_util.h"
