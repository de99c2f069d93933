// Tests for the optim family: written with the family.
#include "test_util.h"
