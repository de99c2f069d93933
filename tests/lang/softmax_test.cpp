// Tests for the softmax family: written with the family.
#include "test_util.h"
