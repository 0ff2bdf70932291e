/** The package version (a test holds it to package.json's). */
export const version: string = '0.1.0';
