package region_test

import (
	"fmt"

	"github.com/ratekit/ratekit/redisstore/region"
)

// Three regions share 600 units: each keeps a floor of 30 and the other 510
// follow the last period's demand. Every region computes this same split
// from the aggregate's data, and the shares sum to the limit.
func ExampleApportion() {
	demand := []int64{700, 200, 100} // units asked for in regions a, b, c
	shares, err := region.Apportion(600, 30, demand)
	if err != nil {
		panic(err)
	}
	fmt.Println(shares, shares[0]+shares[1]+shares[2])
	// A region that asked for nothing keeps its floor.
	shares, _ = region.Apportion(600, 30, []int64{0, 900, 100})
	fmt.Println(shares)
	// Output:
	// [387 132 81] 600
	// [30 489 81]
}
