// Command cert-manager-cainjector is cert-manager's CA injector, built from the
// github.com/cert-manager/cert-manager module at the version clusterctl installs by default (the
// module publishes the injector but not its command): it writes the CA of the Certificate (or
// Secret) a webhook configuration, CustomResourceDefinition or APIService names in its
// cert-manager.io/inject-ca-from(-secret) annotation into that object's caBundle. Leader
// election is off.
//
// Flags: --kubeconfig FILE (controller-runtime's flag; default: $KUBECONFIG),
// --health-probe-bind-address ADDR (default :9403; readyz and healthz).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	cmapi "github.com/cert-manager/cert-manager/pkg/api"
	"github.com/cert-manager/cert-manager/pkg/controller/cainjector"
	"github.com/cert-manager/cert-manager/pkg/util"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	apiregistrationv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

func main() {
	probes := flag.String("health-probe-bind-address", ":9403", "where readyz and healthz are served")
	flag.Parse()
	ctrl.SetLogger(zap.New())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *probes); err != nil {
		fmt.Fprintln(os.Stderr, "cert-manager-cainjector:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, probes string) error {
	config, err := ctrl.GetConfig()
	if err != nil {
		return fmt.Errorf("reading the kubeconfig: %w", err)
	}
	// The user agent names the field manager of the injector's server-side applies.
	config = util.RestConfigWithUserAgent(config, "cainjector")
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme, apiregistrationv1.AddToScheme, cmapi.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			return fmt.Errorf("building the scheme: %w", err)
		}
	}
	manager, err := ctrl.NewManager(config, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: probes,
		// Secrets are read when needed, never cached: only their metadata is watched.
		Client: client.Options{Cache: &client.CacheOptions{DisableFor: []client.Object{&corev1.Secret{}}}},
	})
	if err != nil {
		return fmt.Errorf("creating the manager: %w", err)
	}
	if err := manager.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := manager.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	err = cainjector.RegisterAllInjectors(ctx, manager, cainjector.SetupOptions{
		EnableCertificatesDataSource: true,
		EnabledReconcilersFor: map[string]bool{
			"mutatingwebhookconfiguration":   true,
			"validatingwebhookconfiguration": true,
			"apiservice":                     true,
			"customresourcedefinition":       true,
		},
	})
	if err != nil {
		return fmt.Errorf("registering the injectors: %w", err)
	}
	return manager.Start(ctx)
}
