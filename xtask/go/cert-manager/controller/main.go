// Command cert-manager-controller is cert-manager's controller, built from the
// github.com/cert-manager/cert-manager module at the version clusterctl installs by default. The
// module publishes cert-manager's controllers but not its command, so this entry point wires the
// ones Cluster API's components need: Certificates (trigger, key manager, request manager,
// issuing, readiness, revision manager), CertificateRequests approved and signed by SelfSigned
// and CA issuers, and the Issuer and ClusterIssuer controllers. ACME, Vault and Venafi issuers,
// the ingress and Gateway shims and leader election are not built in.
//
// Flags: --kubeconfig FILE (default: $KUBECONFIG), --cluster-resource-namespace NS (where
// ClusterIssuers keep their Secrets, default cert-manager).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/cert-manager/cert-manager/pkg/controller"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/approver"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/ca"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificaterequests/selfsigned"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/issuing"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/keymanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/readiness"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/requestmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/revisionmanager"
	_ "github.com/cert-manager/cert-manager/pkg/controller/certificates/trigger"
	_ "github.com/cert-manager/cert-manager/pkg/controller/clusterissuers"
	_ "github.com/cert-manager/cert-manager/pkg/controller/issuers"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/ca"
	_ "github.com/cert-manager/cert-manager/pkg/issuer/selfsigned"
)

// The workers each controller runs.
const workers = 5

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "the kubeconfig to use")
	clusterResources := flag.String("cluster-resource-namespace", "cert-manager",
		"where ClusterIssuers keep their Secrets")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *kubeconfig, *clusterResources); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-controller:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, kubeconfig, clusterResources string) error {
	factory, err := controller.NewContextFactory(ctx, controller.ContextOptions{
		Kubeconfig:         kubeconfig,
		KubernetesAPIQPS:   20,
		KubernetesAPIBurst: 50,
		IssuerOptions:      controller.IssuerOptions{ClusterResourceNamespace: clusterResources},
		CertificateOptions: controller.CertificateOptions{
			CertificateRequestMinimumBackoffDuration: time.Minute,
			CertificateRequestMaximumBackoffDuration: time.Hour,
		},
	})
	if err != nil {
		return fmt.Errorf("building the controllers' context: %w", err)
	}
	known := controller.Known()
	running := make([]controller.Interface, 0, len(known))
	for name, construct := range known {
		c, err := construct(factory)
		if err != nil {
			return fmt.Errorf("constructing %s: %w", name, err)
		}
		running = append(running, c)
	}
	// Every controller registered its informers above; start them once, shared.
	shared, err := factory.Build()
	if err != nil {
		return fmt.Errorf("building the shared context: %w", err)
	}
	shared.KubeSharedInformerFactory.Start(ctx.Done())
	shared.SharedInformerFactory.Start(ctx.Done())
	shared.HTTP01ResourceMetadataInformersFactory.Start(ctx.Done())
	fmt.Fprintf(os.Stderr, "cert-manager-controller: running %d controllers\n", len(running))

	var wg sync.WaitGroup
	errs := make(chan error, len(running))
	for _, c := range running {
		wg.Add(1)
		go func(c controller.Interface) {
			defer wg.Done()
			if err := c.Run(workers, ctx); err != nil {
				errs <- err
			}
		}(c)
	}
	wg.Wait()
	close(errs)
	return <-errs
}
